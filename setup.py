"""Package discovery only; everything else is in pyproject.toml.

pyproject.toml cannot add a package to what find_packages finds, and the bundled sample dataset
lives at data/ (the README's commands name it there). So data/ is mapped into the wheel as
engine/bundled/, where engine/paths.py looks when there is no checkout around the package.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["engine", "engine.*", "store", "store.*", "demo", "demo.*"]) + ["engine.bundled"],
    package_dir={"engine.bundled": "data"},
)
