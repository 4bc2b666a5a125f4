"""Forms of the admin's actions that take parameters (signal, retry with edited input)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import RegexValidator

NAME = RegexValidator(r"^[^\s\x00-\x1f\x7f]{1,200}$", "A name without spaces, at most 200 characters.")


class JSONText(forms.JSONField):
    """A JSON textarea; empty means ``null``."""

    widget = forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField durable-json"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)


class SignalForm(forms.Form):
    name = forms.CharField(max_length=200, validators=[NAME])
    payload = JSONText(help_text="JSON; empty for null.")


class RetryForm(forms.Form):
    input = JSONText(help_text="The corrected input of the new run, as JSON.")


class NoForm(forms.Form):
    """Actions without parameters."""


FORMS: dict[str, type[forms.Form]] = {"signal": SignalForm, "retry": RetryForm}


def form_for(action: str) -> type[forms.Form]:
    return FORMS.get(action, NoForm)
