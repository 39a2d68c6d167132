"""Django admin for every model: the topology (``topology``), access keys (``access_keys``),
the commit log and derived state (``core``), the data pipeline's records (``pipeline``),
Halfmoon's alerts (``alerts``) and the operator grants of console users and access keys
(``grants``), on the shared base classes of ``base``. Importing the package registers them all.
"""

# Each registers its model admins.
from broker.admin import access_keys, alerts, core, grants, pipeline, topology  # noqa: F401
