"""The local stand-in for the Azure Functions host (``python -m localrun host``): the host
(host.py) with its listeners, HTTP server and state, the function index, the trigger values
as the worker builds them, and the worker in a process of its own (worker.py)."""
