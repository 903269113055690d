"""One module per `vrh-lmms` subcommand; each defines `configure(parser)` and `run(args) -> int`."""
