"""The Gradio app: layout in app.py, plain handlers in demo.handlers, HTML in demo.render.

Nothing is imported here, so importing a handler loads neither gradio nor a model.
"""
