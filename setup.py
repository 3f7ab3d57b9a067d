"""The package layout, which pyproject.toml cannot express: each top-level folder installs under a name that
cannot collide with a user's own modules (a project's `app/` or `envs/` package stays theirs)."""

from setuptools import find_namespace_packages, setup

FOLDERS = {
    "workbench": "workbench",
    "workbench_app": "app",
    "workbench_local": "local_runtime",
    "workbench_cloud": "cloud_runtime",
    "workbench_envs": "envs",
}


def packages() -> list[str]:
    names = []
    for name, folder in FOLDERS.items():
        names.append(name)
        names += [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]  # data folders too
    return names


if __name__ == "__main__":  # as the build runs it; tests import FOLDERS
    setup(packages=packages(), package_dir={name: folder for name, folder in FOLDERS.items() if name != folder})
