"""Console pages: auth."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
