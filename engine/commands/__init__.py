"""One module per CLI command; see engine/__main__.py.

Modules named `_x.py` are helpers the commands share, not commands: _options (the store, the
run's progress bar, the battery options), _served_options (--backend server), _study (`run`'s
study grids) and _field_words (a request's fields worded as options).
"""
