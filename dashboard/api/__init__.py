"""The JSON API (/api/v1/): one more door onto the same selectors and services as the pages.

`main.api` is the NinjaAPI; each module holds one endpoint group's router. Nothing here decides
anything about capacity or catalogs: it parses, checks the token's scope, calls one selector or
service, and shapes the answer (schemas.py).
"""
