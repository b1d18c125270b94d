"""What the `inspect_ai` entry point loads: PAttriEval's tasks under the names `pattrieval/<task>`.

Inspect names an extension's objects after the top-level Python package that defines them, and
ours is `engine`, so the tasks are registered again under the distribution's name, which is
the one users type (`inspect eval pattrieval/gender`).
"""

from __future__ import annotations

from inspect_ai._util.registry import RegistryInfo, registry_add, registry_info

from engine.inspect_tasks.tasks import TASKS

PREFIX = "pattrieval"

for _name, _task in TASKS.items():
    _info = registry_info(_task)
    registry_add(_task, RegistryInfo(type="task", name=f"{PREFIX}/{_name}", metadata=_info.metadata))
