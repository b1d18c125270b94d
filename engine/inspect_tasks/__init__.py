"""PAttriEval as Inspect AI tasks (`inspect eval pattrieval/gender --model ...`).

Inspect finds them through the `inspect_ai` entry point in pyproject.toml, which imports
engine.inspect_tasks.registry. Needs the `inspect` extra (`pip install pattrieval[inspect]`):
nothing else in the package imports these modules, so the CLI and the app run without it.

- tasks: one task per built-in label type (hai, gender, race) and `custom` for a pair of your
  own; each sample is one dataset item, answered in vanilla, base and cf with our prompts.
- scoring: each sample's citation precision, recall and F1 per mode, read with our citation
  parser, and CAS and CAB as Inspect metrics with engine.statistics.bias's intervals and tests.
"""
