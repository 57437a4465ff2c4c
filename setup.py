"""Maps the top-level folders onto the `meshwire` namespace (docs/design.md §8).

`base/` imports as `meshwire.base`, `control/` as `meshwire.control`, `dataplane/` as
`meshwire.dataplane`, `proto/` as `meshwire.proto` and `tools/` as `meshwire.tools`; every
subpackage found below them follows.
"""

from setuptools import find_packages, setup

FOLDERS = ("base", "control", "dataplane", "proto", "tools")

packages = ["meshwire." + name for name in find_packages(include=[f"{f}*" for f in FOLDERS])]
setup(
    packages=packages,
    package_dir={f"meshwire.{f}": f for f in FOLDERS},
    package_data={"meshwire.proto": ["*.proto"], "meshwire.tools.graph": ["static/*"]},
)
