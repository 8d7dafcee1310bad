"""Local tooling: runs the function app on this machine the way the Functions host would.

Never imported by function_app.py and left out of the deployment package (.funcignore).
"""
