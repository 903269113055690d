import sys

from vrh_lmms.cli import main

sys.exit(main())
