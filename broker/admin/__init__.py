"""Django admin for every model: the broker's own (``core``), the data pipeline's records
(``pipeline``) and Halfmoon's alerts (``alerts``), on the shared base classes of ``base``.
Importing the package registers them all."""

from broker.admin import alerts, core, pipeline  # noqa: F401 - each registers its model admins
