"""``POST callbacks/{token}/``: a third party completes (or fails) a ``ctx.wait_for_callback``.

No login and no CSRF: the signed token in the URL is the credential (a token
this deployment did not sign is a JSON 403). The request body is the payload:
JSON is stored as its value, any other body as its text, an empty body as
``null``. Every answer is JSON: 200 once written, 404 for a callback or run
that does not exist, 409 when it was already completed (or timed out, or its
run ended), 400 for a body the engine refuses (too large, not UTF-8).
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import durable
from durable.exceptions import InvalidInput
from durable_dashboard import serializers as s
from durable_dashboard.api_base import JSONEndpoint, documented

CALLBACK_ERRORS = {
    400: OpenApiResponse(s.ErrorSerializer, description="A body the engine refuses."),
    403: OpenApiResponse(s.ErrorSerializer, description="Not a token this deployment signed."),
    404: OpenApiResponse(s.ErrorSerializer, description="No such run or callback (any more)."),
    409: OpenApiResponse(s.ErrorSerializer, description="Already completed or failed, timed out, or its run ended."),
}


def request_payload(request: Request) -> Any:
    """The body as the callback's payload: parsed JSON, else its text; None when empty."""
    raw = request.body
    if not raw.strip():
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise InvalidInput("the callback body must be UTF-8 text (JSON or plain)") from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error(payload: Any) -> Any:
    """A failure body as ``fail_callback``'s error: a dict with a message as it is, anything else as text."""
    if isinstance(payload, dict) and isinstance(payload.get("message"), str) and payload["message"]:
        return payload
    if payload is None or payload == "":
        return "failed by the callback's caller"
    return payload if isinstance(payload, str) else json.dumps(payload)


class CallbackView(JSONEndpoint, APIView):
    """Complete the callback the URL's token names with the request body (``fail``: fail it with the body)."""

    permission_classes = [AllowAny]
    fail = False

    def get_authenticators(self) -> list[BaseAuthentication]:
        return []  # the token is the credential; no session, so no CSRF either

    @documented(
        summary="Complete a callback (no login: the signed token is the credential; the body is the payload)",
        request=None,
        responses={200: s.CallbackResultSerializer, **CALLBACK_ERRORS},
        auth=[],
    )
    def post(self, request: Request, token: str) -> Response:
        payload = request_payload(request)
        if self.fail:
            durable.fail_callback(token, _error(payload))
        else:
            durable.complete_callback(token, payload)
        return Response({"ok": True, "outcome": "failed" if self.fail else "completed"})
