"""Maps the top-level folders onto sub-packages of ``llmtrace`` (DESIGN.md section 1).

Every package below each folder is found and listed, so a wheel never silently lacks one
(tests/test_packaging.py builds the wheel and imports each of them).
"""

from setuptools import find_packages, setup

FOLDERS = {
    "llmtrace": "llmtrace",
    "tracer": "llmtrace.tracer",
    "adapters": "llmtrace.adapters",
    "backend": "llmtrace.backend",
    "analyzers": "llmtrace.analyzers",
    "tui": "llmtrace.tui",
    "report": "llmtrace.report",
}

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
