"""What the console's forms share: a form that shows a service's error on the field it names."""

from __future__ import annotations

from django import forms

from broker.errors import HalfmoonError

# Which field a service error code is about; other codes are errors of the whole form.
FIELD_OF_CODE = {
    "invalid_name": "name",
    "reserved_group": "name",
    "system_topic": "name",
    "topic_exists": "name",
    "producer_group_exists": "name",
    "consumer_group_exists": "name",
    "invalid_queue_nums": "queue_nums",
    "invalid_max_delivery_attempts": "max_delivery_attempts",
    "check_url_not_allowed": "check_url",
}


class ServiceErrorsForm(forms.Form):
    """A form that shows a service's error (``broker.errors.HalfmoonError``) as its own."""

    def service_error_add(self, error: HalfmoonError) -> None:
        """Add ``error``'s message to the field its code is about (``FIELD_OF_CODE``), or to
        the whole form when this form has no such field."""
        name = FIELD_OF_CODE.get(error.code)
        self.add_error(name if name in self.fields else None, error.message)
