"""A small real HTTPS webhook server for the lab's admission tests, run as a lab pod.

The path chooses the answer, so one pod serves every case:
  /allow            allowed
  /warn             allowed, with two warnings
  /deny429          denied with a 429 Status and retryAfterSeconds 7
  /hold            denied with a 429 Status without retryAfterSeconds
  /deny-no-code     denied with a Status without code (the API server makes it 400)
  /slow             answers allowed after 5 s (for timeoutSeconds)
  /bad-uid          an answer whose uid does not match the request's
Every request body is appended as one JSON line to --log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def build(log: pathlib.Path) -> Starlette:
    async def review(request: Request) -> JSONResponse:
        body = await request.json()
        with log.open("a") as fh:
            fh.write(json.dumps({"path": request.url.path, "query": request.url.query,
                                 "body": body}) + "\n")
        uid = body["request"]["uid"]
        mode = request.url.path.strip("/")
        response: dict[str, object] = {"uid": uid, "allowed": True}
        if mode == "warn":
            response["warnings"] = ["first warning", 'second "quoted" warning']
        elif mode == "deny429":
            response = {"uid": uid, "allowed": False, "status": {
                "code": 429, "reason": "TooManyRequests",
                "message": "waiting for a stand-in",
                "details": {"retryAfterSeconds": 7}}}
        elif mode == "hold":
            response = {"uid": uid, "allowed": False, "status": {
                "code": 429, "reason": "TooManyRequests", "message": "waiting for a stand-in"}}
        elif mode == "deny-no-code":
            response = {"uid": uid, "allowed": False, "status": {"message": "no"}}
        elif mode == "slow":
            await asyncio.sleep(5)
        elif mode == "bad-uid":
            response["uid"] = "not-" + uid
        return JSONResponse({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": response})

    return Starlette(routes=[Route("/{mode}", review, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    uvicorn.run(build(pathlib.Path(args.log)), host=args.host, port=args.port,
                ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning")


if __name__ == "__main__":
    main()
