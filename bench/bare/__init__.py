"""A minimal Django project: the framework's own ceiling for a transaction's two writes.

Served by ``bench/throughput.py`` exactly as Halfmoon is (uvicorn, 2 workers, ASGI, Django's
psycopg pool); see ``bench/README.md``.
"""
