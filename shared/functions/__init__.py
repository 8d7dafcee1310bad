"""The functions function_app.py registers, one module per trigger family: each holds its
triggers' decorators and the unwrapping of what they hand over, and calls one handler."""
