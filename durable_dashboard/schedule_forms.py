"""Admin forms for schedules: the spec's fields, validated by :class:`durable.Schedule` (bad values are form errors)."""

from __future__ import annotations

from typing import Any

from django import forms

import durable
from durable.exceptions import DurableError
from durable.models import Schedule as ScheduleRow
from durable.schedules.spec import MAX_WINDOWS, Overlap, Schedule

_BLANK_IS_NONE = ("every", "cron", "jitter", "start_at", "end_at")


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """Create or edit a schedule. The row is written by durable's service functions, never by ``save()``."""

    every = forms.CharField(required=False, help_text='A duration: "15m", "1h30m", "1d". Leave empty for cron.')
    cron = forms.CharField(required=False, help_text='5 fields ("0 2 * * *") or 6 with seconds first.')
    timezone = forms.CharField(initial="UTC", help_text="An IANA zone, e.g. Europe/Lisbon (cron only).")
    input = forms.JSONField(required=False, help_text="JSON input of every run.")
    overlap = forms.ChoiceField(choices=[(o.value, o.value) for o in Overlap], initial=Overlap.ALLOW.value)
    jitter = forms.CharField(required=False, help_text="A duration; each window starts later by a stable part of it.")
    catch_up = forms.IntegerField(min_value=1, max_value=MAX_WINDOWS, initial=1)
    start_at = forms.DateTimeField(required=False)
    end_at = forms.DateTimeField(required=False)

    class Meta:
        model = ScheduleRow
        fields = ("key", "workflow")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["key"].disabled = True
            spec = self.instance.spec or {}
            for name in ("every", "cron", "timezone", "input", "overlap", "jitter", "catch_up", "start_at", "end_at"):
                self.initial[name] = spec.get(name)

    def spec_fields(self) -> dict[str, Any]:
        """The cleaned spec fields (blank means none)."""
        data = {name: self.cleaned_data.get(name) for name in Schedule.__dataclass_fields__ if name != "paused"}
        for name in _BLANK_IS_NONE:
            if data.get(name) in ("", None):
                data[name] = None
        return data

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            Schedule(**self.spec_fields())
            if cleaned.get("workflow"):
                from durable import runtime

                runtime.registry.get_workflow(cleaned["workflow"])
        except DurableError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not self.instance.pk and cleaned.get("key"):
            try:
                durable.get_schedule(cleaned["key"])
                raise forms.ValidationError(f"a schedule with key {cleaned['key']!r} exists")
            except durable.ScheduleNotFound:
                pass
            except DurableError as exc:
                raise forms.ValidationError(str(exc)) from None
        return cleaned

    def audit_params(self) -> dict[str, Any]:
        """The spec as JSON for the service call and the audit log (instants as ISO strings)."""
        data = self.spec_fields()
        for name in ("start_at", "end_at"):
            if data[name] is not None:
                data[name] = data[name].isoformat()
        return data


class BackfillForm(forms.Form):
    """Every window in ``[start, end]`` (at most 1,000)."""

    start = forms.DateTimeField()
    end = forms.DateTimeField()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("start") and cleaned.get("end") and cleaned["end"] < cleaned["start"]:
            raise forms.ValidationError("end must not be before start")
        return cleaned
