"""gunicorn's settings for this dashboard: `gunicorn -c gunicorn.conf.py config.wsgi`.

gunicorn trusts X-Forwarded-Proto (and X-Forwarded-Ssl, X-Forwarded-Protocol) from
127.0.0.1 by default and then tells Django the request came over HTTPS, so a plain-HTTP
request from this machine could claim to be secure (and be sent HSTS). Here those headers
are trusted only when the deployment says a TLS proxy sits in front (BEHIND_TLS_PROXY=true,
the same variable Django's SECURE_PROXY_SSL_HEADER follows), and then only from
FORWARDED_ALLOW_IPS (gunicorn's own variable; default: this machine).

The request line may be 8,190 bytes, gunicorn's most (its default, 4,094, answered a long placement
query with a plain-text 414 before the API could say it): the API itself refuses a query string over
API_QUERY_MAX (8,000 bytes, dashboard/views/middleware.py) with its documented JSON 414.

Everything else (bind, workers, threads) stays on the command line.
"""

import os
import sys
from pathlib import Path

# gunicorn reads this file before it puts the application's directory on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from config.env import env_bool  # after the path above

if env_bool("BEHIND_TLS_PROXY", False):
    forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
else:
    forwarded_allow_ips = ""
    secure_scheme_headers = {}

limit_request_line = 8190
