from orderctl.main import run

raise SystemExit(run())
