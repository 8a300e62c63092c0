"""A real HTTPS admission webhook that answers as drainsafe's eviction guard holds an
eviction, run as a lab pod: the first --hold eviction reviews are denied with a 429 Status
whose cause is drainsafe.io/EvictionGuardHold (kube.errors.GUARD_HOLD_CAUSE) and
retryAfterSeconds 1, the rest are allowed. Every review is appended to --log as one line.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from drainsafe.kube.errors import GUARD_HOLD_CAUSE


def build(log: pathlib.Path, hold: int) -> Starlette:
    async def review(request: Request) -> JSONResponse:
        body = await request.json()
        uid = body["request"]["uid"]
        held = sum(1 for _ in log.open()) if log.exists() else 0
        with log.open("a") as fh:
            fh.write(json.dumps({"pod": body["request"].get("name")}) + "\n")
        response: dict[str, object] = {"uid": uid, "allowed": True}
        if held < hold:
            response = {"uid": uid, "allowed": False, "status": {
                "code": 429, "reason": "TooManyRequests",
                "message": "held until a stand-in is Ready",
                "details": {"retryAfterSeconds": 1, "causes": [
                    {"reason": GUARD_HOLD_CAUSE,
                     "message": "held until a stand-in of default/w is Ready"}]}}}
        return JSONResponse({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": response})

    return Starlette(routes=[Route("/review", review, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--hold", type=int, default=2)
    args = parser.parse_args()
    uvicorn.run(build(pathlib.Path(args.log), args.hold), host=args.host, port=args.port,
                ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning")


if __name__ == "__main__":
    main()
