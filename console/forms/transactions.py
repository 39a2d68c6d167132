"""The console's forms.

``TransactionFilterForm`` reads the stuck list's filter from the URL (GET), so a view can be
bookmarked and shared; the same parameters come back as hidden fields of the bulk-action form.
``filters_from_form`` turns a valid form into the keyword arguments of
``broker.selectors.transactions.stuck_transactions`` (one definition of the filter for the list,
its live rows and bulk actions on a filter).

More: docs/design.md, "Module notes", console/forms/transactions.py."""

from __future__ import annotations

from typing import Any

from django import forms

from broker.rules.states import DiscardReason
from broker.selectors.transactions import STUCK_STATES, Cursor

FILTER_PARAMS = ("state", "group", "topic", "min_age_s", "min_checks", "discard_reason", "q")
"""The URL parameters of the filter, in the order the form declares them."""

PER_PAGE_DEFAULT = 50
PER_PAGE_MAX = 200


class TransactionFilterForm(forms.Form):
    """The stuck list's filter and paging, from ``request.GET``. Invalid values make form
    errors (shown on the page, answered with 400), never a server error."""

    state = forms.MultipleChoiceField(
        choices=[(s, s) for s in STUCK_STATES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    group = forms.CharField(required=False, max_length=127, label="Producer group")
    topic = forms.CharField(required=False, max_length=127)
    min_age_s = forms.IntegerField(
        required=False, min_value=0, max_value=10 * 365 * 86400, label="Older than (s)"
    )
    min_checks = forms.IntegerField(
        required=False, min_value=0, max_value=1_000_000, label="At least checks"
    )
    discard_reason = forms.ChoiceField(
        choices=[("", "any"), *DiscardReason.choices], required=False
    )
    q = forms.CharField(
        required=False, max_length=1024, label="Msg id, transaction id or key", strip=True
    )
    after = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    before = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    per_page = forms.IntegerField(
        required=False, min_value=1, max_value=PER_PAGE_MAX, widget=forms.HiddenInput
    )

    def _clean_cursor(self, name: str) -> Cursor | None:
        text = self.cleaned_data.get(name) or ""
        if not text:
            return None
        try:
            return Cursor.decode(text)
        except ValueError:
            raise forms.ValidationError("Not a page position.", code="invalid_cursor") from None

    def clean_after(self) -> Cursor | None:
        return self._clean_cursor("after")

    def clean_before(self) -> Cursor | None:
        return self._clean_cursor("before")

    def clean_per_page(self) -> int:
        return self.cleaned_data.get("per_page") or PER_PAGE_DEFAULT

    def filter_params(self) -> list[tuple[str, str]]:
        """The filter's (name, value) pairs as given (valid or not), without paging: for
        links, the hidden fields of the bulk form and the live row requests."""
        pairs: list[tuple[str, str]] = []
        for name in FILTER_PARAMS:
            for value in self.data.getlist(name) if hasattr(self.data, "getlist") else []:
                if value != "":
                    pairs.append((name, value))
        return pairs


def filters_from_form(form: TransactionFilterForm) -> dict[str, Any]:
    """The keyword arguments of ``broker.selectors.transactions.stuck_transactions`` for a valid
    form (call ``form.is_valid()`` first): ``states``, ``producer_group``, ``topic``,
    ``min_age_ms``, ``min_check_times``, ``discard_reason``, ``q``. ``now`` is left to the
    caller."""
    data = form.cleaned_data
    min_age_s = data.get("min_age_s")
    return {
        "states": list(data.get("state") or []),
        "producer_group": data.get("group") or "",
        "topic": data.get("topic") or "",
        "min_age_ms": min_age_s * 1000 if min_age_s is not None else None,
        "min_check_times": data.get("min_checks"),
        "discard_reason": data.get("discard_reason") or "",
        "q": data.get("q") or "",
    }
