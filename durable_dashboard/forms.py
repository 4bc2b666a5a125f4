"""Forms of the admin: action parameters (signal, retry), the reason every action may carry, starting a run."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _

from durable.runtime import registry

NAME = RegexValidator(r"^[^\s\x00-\x1f\x7f]{1,200}$", _("A name without spaces, at most 200 characters."))
RUN_ID = RegexValidator(r"^[^\s/\x00-\x1f\x7f]{1,255}$", _("At most 255 characters, without spaces or slashes."))


class JSONText(forms.JSONField):
    """A JSON textarea; empty means ``null``."""

    widget = forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField durable-json"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)


class ReasonForm(forms.Form):
    """An action's optional reason: kept in the audit log and shown on the run."""

    reason = forms.CharField(
        label=_("Reason"),
        required=False,
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=_("Optional; kept in the audit log and shown on the run."),
    )


class SignalForm(ReasonForm):
    name = forms.CharField(label=_("Signal name"), max_length=200, validators=[NAME])
    payload = JSONText(label=_("Payload"), help_text=_("JSON; empty for null."))
    field_order = ["name", "payload", "reason"]


class RetryForm(ReasonForm):
    input = JSONText(label=_("Input"), help_text=_("The corrected input of the new run, as JSON."))
    field_order = ["input", "reason"]


class ForkForm(ReasonForm):
    from_seq = forms.IntegerField(
        label=_("From position"),
        min_value=1,
        help_text=_("The new run keeps the history before this position and executes from it."),
    )
    input = JSONText(
        label=_("Input"),
        help_text=_("The new run's input, as JSON; empty keeps the original's. The kept positions must still replay."),
    )
    field_order = ["from_seq", "input", "reason"]


FORMS: dict[str, type[forms.Form]] = {"signal": SignalForm, "retry": RetryForm, "fork": ForkForm}


def form_for(action: str) -> type[forms.Form]:
    return FORMS.get(action, ReasonForm)


def _workflow_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted({wf.name for wf in registry.workflows()})]


class StartForm(forms.Form):
    """Start a run of a registered workflow; the workflow's validator checks the input (errors on the form)."""

    workflow = forms.ChoiceField(label=_("Workflow"), choices=_workflow_choices)
    input = JSONText(label=_("Input"), help_text=_("JSON; empty for null. The workflow's validator checks it."))
    run_id = forms.CharField(
        label=_("Run id"),
        required=False,
        validators=[RUN_ID],
        help_text=_("Optional; an id that exists already starts nothing new."),
    )
    tags = forms.CharField(label=_("Tags"), required=False, max_length=2000, help_text=_("Comma separated."))
    namespace = forms.CharField(label=_("Namespace"), required=False, max_length=100, validators=[NAME])

    def params(self) -> dict[str, Any]:
        """The cleaned form as the parameters of :func:`durable_dashboard.operations.start`."""
        data = self.cleaned_data
        params: dict[str, Any] = {"workflow": data["workflow"], "input": data["input"]}
        if data["run_id"]:
            params["run_id"] = data["run_id"]
        tags = [t.strip() for t in data["tags"].split(",") if t.strip()]
        if tags:
            params["tags"] = tags
        if data["namespace"]:
            params["namespace"] = data["namespace"]
        return params
