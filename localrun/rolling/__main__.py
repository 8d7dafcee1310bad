"""``python -m localrun.rolling``: the rolling rehearsal (rolling.py)."""

from localrun.rolling.rolling import main

if __name__ == "__main__":
    raise SystemExit(main())
