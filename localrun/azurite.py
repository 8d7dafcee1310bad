"""Start and stop a private Azurite (Blob, Queue, Table) on free loopback ports."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT = "devstoreaccount1"


class AzuriteError(RuntimeError):
    pass


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
        except OSError:  # not glibc (Alpine's musl): the parent's stop() is all there is
            return
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AzuriteError(f"azurite exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AzuriteError(f"azurite did not listen on port {port} in time")


@dataclass
class Azurite:
    """A running Azurite process. Use as a context manager, or call stop()."""

    blob_port: int
    queue_port: int
    table_port: int
    location: Path
    process: subprocess.Popen[bytes]
    _owns_location: bool = field(default=False, repr=False)

    @property
    def connection_string(self) -> str:
        return (
            # The well-known Azurite development key: public, valid only against an emulator.
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
            "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
            f"BlobEndpoint=http://127.0.0.1:{self.blob_port}/{ACCOUNT};"
            f"QueueEndpoint=http://127.0.0.1:{self.queue_port}/{ACCOUNT};"
            f"TableEndpoint=http://127.0.0.1:{self.table_port}/{ACCOUNT};"
        )

    @classmethod
    def start(cls, location: Path | None = None, ports: tuple[int, int, int] | None = None,
              timeout: float = 30.0) -> Azurite:
        binary = ROOT / "node_modules" / ".bin" / "azurite"
        if not binary.exists():
            raise AzuriteError(f"{binary} not found: run 'make install' first (make demo "
                               "installs it too)")
        owns = location is None
        loc = Path(tempfile.mkdtemp(prefix="azurite-")) if location is None else location
        loc.mkdir(parents=True, exist_ok=True)
        blob, queue, table = ports or (free_port(), free_port(), free_port())
        # Started directly, not through npx, so that this PID is the server's own. On Linux it
        # is also told to stop if we die, so even a killed parent leaves no server behind.
        proc = subprocess.Popen(
            [str(binary), "--silent", "--disableTelemetry", "--skipApiVersionCheck",
             "--location", str(loc), "--blobHost", "127.0.0.1", "--queueHost", "127.0.0.1",
             "--tableHost", "127.0.0.1", "--blobPort", str(blob), "--queuePort", str(queue),
             "--tablePort", str(table)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        try:
            for port in (blob, queue, table):
                _wait_for_port(port, deadline, proc)
        except BaseException:  # Ctrl-C while it starts too: no server left behind
            cls._kill(proc)
            raise
        return cls(blob, queue, table, loc, proc, owns)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop(self) -> None:
        self._kill(self.process)
        if self._owns_location:
            shutil.rmtree(self.location, ignore_errors=True)

    def __enter__(self) -> Azurite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
