"""Map the repo's top-level `model_wrappers/` and `tasks/` folders under the `vrh_lmms` namespace.

They ship inside the one distribution as `vrh_lmms.model_wrappers` and `vrh_lmms.tasks`, so nothing claims generic
top-level import names such as `tasks` in site-packages. Everything else is declared in pyproject.toml.
"""

from setuptools import find_namespace_packages, find_packages, setup

ROOTS = {"vrh_lmms": "vrh_lmms", "vrh_lmms.model_wrappers": "model_wrappers", "vrh_lmms.tasks": "tasks"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = [], {}
    for name, folder in ROOTS.items():
        package_dir[name] = folder
        packages.append(name)
        # Task folders (YAML + helper modules) and vrh_lmms/assets (data) have no __init__.py: namespace packages.
        finder = find_namespace_packages if folder in ("tasks", "vrh_lmms") else find_packages
        for sub in finder(folder, exclude=["*__pycache__*"]):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    # Packages under vrh_lmms that live in the mapped folders must not also be found under vrh_lmms/.
    return sorted(set(packages)), package_dir


packages, package_dir = _packages()
setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "vrh_lmms.tasks": ["**/*.yaml", "**/*.jsonl", "**/*.parquet", "**/*.md", "**/*.tmpl"],
        "vrh_lmms": ["assets/**/*", "py.typed"],
        "vrh_lmms.report.explorer_page": ["*.js", "*.css"],  # the explorer page's script and style
    },
    include_package_data=True,
)
