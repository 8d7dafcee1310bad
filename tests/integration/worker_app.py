"""A small app for the worker-process tests: each function tells which process ran it."""

from __future__ import annotations

import json
import os
import time

import azure.functions as func
from azure.storage.queue import QueueClient

app = func.FunctionApp()


@app.function_name("probe")
@app.queue_trigger(arg_name="msg", queue_name="%ProbeQueueName%", connection="AzureWebJobsStorage")
def probe(msg: func.QueueMessage) -> None:
    if msg.get_body() == b"fail":
        raise RuntimeError("asked to fail")
    # Settings are the worker's environment, as in Azure.
    env = dict(os.environ)
    QueueClient.from_connection_string(env["AzureWebJobsStorage"],
                                       env["ProbeRepliesQueueName"]).send_message(
        json.dumps({"pid": os.getpid(), "body": msg.get_body().decode(),
                    "dequeue_count": msg.dequeue_count}))


@app.function_name("whoami")
@app.route(route="whoami", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def whoami(req: func.HttpRequest) -> func.HttpResponse:
    if req.params.get("hang"):
        time.sleep(60)
    return func.HttpResponse(json.dumps({"pid": os.getpid(), "name": req.params.get("name")}),
                             status_code=201, headers={"X-Probe": "yes"},
                             mimetype="application/json")


@app.function_name("relay")
@app.route(route="relay", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@app.queue_output(arg_name="out", queue_name="%ProbeRepliesQueueName%",
                  connection="AzureWebJobsStorage")
def relay(req: func.HttpRequest, out: func.Out[str]) -> func.HttpResponse:
    out.set(json.dumps({"pid": os.getpid(), "body": req.get_body().decode()}))
    return func.HttpResponse(status_code=202)
