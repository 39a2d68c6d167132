"""Django admin for every model: the broker's own (``core``), the data pipeline's records
(``pipeline``), Halfmoon's alerts (``alerts``) and the operator grants of console users and
access keys (``grants``), on the shared base classes of ``base``.
Importing the package registers them all."""

from broker.admin import alerts, core, grants, pipeline  # noqa: F401 - each registers its model admins
