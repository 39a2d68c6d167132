"""What the console's forms share: a form that shows a service's error on the field it is
about."""

from __future__ import annotations

from typing import ClassVar

from django import forms

from broker.errors import HalfmoonError


class ServiceErrorsForm(forms.Form):
    """A form that shows a service's error (``broker.errors.HalfmoonError``) as its own: on the
    field the error's ``details.field`` names, else on the field ``field_of_code`` gives for
    its code, else (no such field on this form) on the whole form."""

    field_of_code: ClassVar[dict[str, str]] = {}
    """Which field a service error code is about, for errors whose details name none."""

    def service_error_add(self, error: HalfmoonError) -> None:
        """Add ``error``'s message to the field it is about, or to the whole form."""
        name = error.details.get("field") or self.field_of_code.get(error.code)
        self.add_error(name if name in self.fields else None, error.message)
