"""HTTP routers: :mod:`.sync` (client API, ``/sync/v1``) and :mod:`.admin` (``/api``)."""
