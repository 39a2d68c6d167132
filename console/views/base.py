"""What the console's views share: the admin's create-and-edit form view that calls a service
and shows its errors on the form."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from broker.errors import Conflict, InvalidInput, NotFound
from console.forms.base import ServiceErrorsForm
from console.permissions import ManageConsoleRequired

FORM_TEMPLATE = "console/topology/form.html"


class ServiceFormView(ManageConsoleRequired, View, ABC):
    """GET shows ``form_class`` (filled by ``initial``); POST validates it and calls
    ``apply``; a service error is shown on the form, success redirects to ``list_route``."""

    form_class: ClassVar[type[ServiceErrorsForm]]
    title: ClassVar[str]
    noun: ClassVar[str]
    list_route: ClassVar[str]

    def initial(self, name: str | None) -> dict[str, Any]:
        """The form's initial values (an edit: the object's current ones)."""
        return {}

    @abstractmethod
    def apply(self, data: dict[str, Any], name: str | None) -> Any:
        """Call the service with the cleaned ``data``; return what it returned."""

    def done(self, request: HttpRequest, result: Any) -> HttpResponse:
        """The answer after a successful ``apply``: back to the list with a message."""
        messages.success(request, f"{self.noun} {result} saved.")
        return redirect(self.list_route)

    def _render(
        self, request: HttpRequest, form: ServiceErrorsForm, name: str | None, status: int = 200
    ) -> HttpResponse:
        context = {"form": form, "title": self.title, "name": name, "list_route": self.list_route}
        return render(request, FORM_TEMPLATE, context, status=status)

    def get(self, request: HttpRequest, name: str | None = None) -> HttpResponse:
        return self._render(request, self.form_class(initial=self.initial(name)), name)

    def post(self, request: HttpRequest, name: str | None = None) -> HttpResponse:
        self.initial(name)  # 404 for an unknown name
        form = self.form_class(request.POST)
        if form.is_valid():
            try:
                result = self.apply(form.cleaned_data, name)
            except NotFound as error:
                raise Http404(error.message) from error
            except (InvalidInput, Conflict) as error:
                form.service_error_add(error)
            else:
                return self.done(request, result)
        return self._render(request, form, name, status=400)
