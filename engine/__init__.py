"""Attribution evaluation for retrieval-augmented LLMs (the PAttriEval system).

Nothing heavy is imported here: torch and transformers load only when a command needs them.
"""

__version__ = "0.1.0"
