"""Every error of the REST API is JSON: ``{"detail": ..., "code": ...}`` with the documented status.

* Durable's own errors become clear 4xx (:data:`STATUS_BY_CODE`).
* Validation errors carry ``errors`` per field as well.
* A database that cannot be reached is a 503 with ``Retry-After`` (the request
  changed nothing it could not finish; the client may try again).
* A body larger than the API accepts is a 413, even past Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE``.
* Anything else unexpected is logged and answered with a JSON 500, never a
  traceback page.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from durable.exceptions import DurableError
from durable_dashboard import operations

logger = logging.getLogger("durable_dashboard.api")

STATUS_BY_CODE = {
    "run_not_found": status.HTTP_404_NOT_FOUND,
    "schedule_not_found": status.HTTP_404_NOT_FOUND,
    "queue_not_found": status.HTTP_404_NOT_FOUND,
    "entity_not_found": status.HTTP_404_NOT_FOUND,
    "schedule_exists": status.HTTP_409_CONFLICT,
    "event_not_set": status.HTTP_404_NOT_FOUND,
    "update_rejected": status.HTTP_400_BAD_REQUEST,
    "workflow_not_found": status.HTTP_400_BAD_REQUEST,
    "invalid_input": status.HTTP_400_BAD_REQUEST,
    "invalid_run_state": status.HTTP_409_CONFLICT,
    # A singleton workflow's key has as many runs running and waiting as it takes: try later.
    "queue_full": status.HTTP_429_TOO_MANY_REQUESTS,
    "invalid_callback_token": status.HTTP_403_FORBIDDEN,
    "callback_not_found": status.HTTP_404_NOT_FOUND,
    "callback_already_completed": status.HTTP_409_CONFLICT,
    "breakpoint_not_found": status.HTTP_404_NOT_FOUND,
}
# Seconds a client is told to wait before retrying after a database outage.
RETRY_AFTER_SECONDS = 5


def _first_message(errors: Any, path: str = "") -> str:
    if isinstance(errors, dict):
        for key, value in errors.items():
            return _first_message(value, f"{path}.{key}" if path else str(key))
    if isinstance(errors, list) and errors:
        return _first_message(errors[0], path)
    return f"{path}: {errors}" if path and path != "non_field_errors" else str(errors)


def database_unavailable() -> Response:
    """The answer to a request the database could not serve: JSON 503 with ``Retry-After``."""
    return Response(
        {"detail": "The database is unavailable; try again shortly.", "code": "database_unavailable"},
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def payload_too_large() -> Response:
    return Response(
        {"detail": "Request body too large.", "code": "payload_too_large"},
        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler for the API's views (set on them, whatever ``REST_FRAMEWORK`` says)."""
    if isinstance(exc, DurableError):
        code = operations.error_code(exc)
        return Response({"detail": str(exc), "code": code}, status=STATUS_BY_CODE.get(code, 400))
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("API request failed: database unavailable (%s)", exc)
        return database_unavailable()
    if isinstance(exc, RequestDataTooBig):
        return payload_too_large()
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.error("API request failed", exc_info=exc)
        code = "database_error" if isinstance(exc, DatabaseError) else "internal_error"
        return Response({"detail": "Internal error.", "code": code}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    _reshape(exc, response)
    return response


def _reshape(exc: Exception, response: Response) -> None:
    """Give DRF's own answers the API's ``{"detail", "code"}`` shape."""
    if isinstance(exc, ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        if set(errors) == {"detail"} and not isinstance(errors["detail"], (dict, list)):
            response.data = {"detail": str(errors["detail"]), "code": "invalid"}
        else:
            response.data = {
                "detail": f"Invalid request: {_first_message(errors)}",
                "code": "invalid",
                "errors": errors,
            }
    elif isinstance(exc, APIException):
        detail = exc.detail
        code = getattr(detail, "code", None) or exc.default_code
        response.data = {"detail": str(detail), "code": str(code)}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {
            "detail": str(response.data["detail"]),
            "code": "not_found" if response.status_code == 404 else "error",
        }
