"""Local tooling: runs the function app on this machine the way the Functions host would.

host/ the host's stand-in, bench/ the benchmark, rolling/ the rolling-upgrade rehearsal; beside
them the demo and the pieces they share (Azurite, the Service Bus stand-in, the app settings,
the storage meter). Never imported by function_app.py and left out of the deployment package
(.funcignore).
"""
