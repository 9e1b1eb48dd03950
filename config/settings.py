"""One settings file, read from the environment.

With no environment at all it runs the embedded default: a private PostgreSQL and Celery's
filesystem transport under ./var, on the simulated grid. Production sets DATABASE_URL,
CELERY_BROKER_URL, SECRET_KEY, ALLOWED_HOSTS and DEBUG=false (see README "Configuration").
"""

import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.embedded_db import EmbeddedDb
from config.env import (
    RUN_SETTINGS_FILE,
    env_bool,
    env_choice,
    env_float,
    env_ids,
    env_int,
    env_list,
    env_str,
    run_settings_load,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var"))).resolve()
# The embedded default (no DATABASE_URL): what `make run` decided for the demo (VAR_DIR/run.env, written by
# scripts/run.py) is read by every process, so `manage.py precheck` judges under the web's settings. The
# environment wins; production sets the same variables for every process and has no such file.
RUN_SETTINGS = {} if env_str("DATABASE_URL", "") else run_settings_load(VAR_DIR / RUN_SETTINGS_FILE)

DEBUG = env_bool("DEBUG", True)
# With DEBUG on, show Django's technical 404/500 pages instead of the product's (dashboard.views.middleware).
DEBUG_ERROR_PAGES = env_bool("DEBUG_ERROR_PAGES", False)
# The embedded default needs a key to start; it is only ever used with DEBUG on.
_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
if not DEBUG and SECRET_KEY == _DEV_SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY is the development key; set a real one when DEBUG is false")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    # django-ninja: serves its Swagger UI from our own static files (CSP allows only 'self').
    "ninja",
    "dashboard",
    "sim",  # the simulated grid's and month's commands (simgrid, simulate_traffic, demo_fleet)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outermost but for security: it stores the grid requests after every inner layer is done.
    "dashboard.views.middleware.GridRequestsStore",
    # Next: every error under /api/ leaves as {"detail", "field"} JSON, whichever layer made it.
    "dashboard.views.middleware.ApiErrorShape",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "dashboard.views.middleware.SessionExpiry",
    "dashboard.views.middleware.NoStoreForSignedIn",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Inside CommonMiddleware (its slash redirect still wins) and CSP (its header still goes out).
    "dashboard.views.middleware.ProductErrorPages",
    # Last, as django-axes asks: it turns a lockout into its response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.views.alerts.banner",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {
            "default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0, minimum=0))
        }
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is malformed: {exc}") from None
else:
    # The embedded default: a private PostgreSQL under VAR_DIR/postgres, on a unix socket, that
    # scripts/run.py (`make run`) and `python -m config.embedded_db` start (config.embedded_db).
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": EmbeddedDb.of(VAR_DIR).settings()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery ---------------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue_dir = VAR_DIR / "broker" / "queue"
    _control_dir = VAR_DIR / "broker" / "control"
    _queue_dir.mkdir(parents=True, exist_ok=True)
    _control_dir.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "control_folder": str(_control_dir),
    }
else:
    _broker_socket_timeout = env_float("CELERY_BROKER_SOCKET_TIMEOUT", 5.0, minimum=0.1)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # A worker killed outright gets its unacked message back only after this long.
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=60),
        # Without these a hung Redis (alive, not answering) blocks an admin's click forever.
        "socket_timeout": _broker_socket_timeout,
        "socket_connect_timeout": _broker_socket_timeout,
    }
# Publishing happens inside a click: give up quickly and say so, rather than retry for long.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
# Job state lives in dashboard.Job; Celery's result backend is not used.
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 660, minimum=1)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A job the worker is running when the broker's connection drops runs on: its writes go to PostgreSQL, not
# the broker, and the message that comes back (unacked, acks_late) finds its job finished or heartbeating and
# claims nothing (jobs.services.jobs.job_claim). Cancelling it (Celery 6's default) would throw away work
# half done for a redelivery to start again. Said here, so Celery 6 changes nothing behind our back (Celery 5
# still warns on each connection loss while it is off: its logging setup forces its own warnings on).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# A running job must write a heartbeat at least this often; the reaper fails it after this.
JOB_HEARTBEAT_TIMEOUT = env_int("JOB_HEARTBEAT_TIMEOUT", 120, minimum=5)
# A queued job no worker took within this long is failed by the reaper (no worker running?). It must
# outlast a worker busy with a full-length job (CELERY_TASK_TIME_LIMIT), so a busy worker loses nothing.
JOB_QUEUED_TIMEOUT = env_int("JOB_QUEUED_TIMEOUT", 900, minimum=10)
# A job still queued this long has its message sent again (a Redis restarted empty lost it).
JOB_RESEND_AFTER = env_int("JOB_RESEND_AFTER", 120, minimum=5)
# A job whose worker died this many times is given up rather than retried again.
JOB_MAX_ATTEMPTS = env_int("JOB_MAX_ATTEMPTS", 3, minimum=1)
# A policy edit over more nodes than this saves at once and leaves their figures to a job (policies.services.policy_figures).
POLICY_FIGURES_INLINE_NODES = env_int("POLICY_FIGURES_INLINE_NODES", 500, minimum=0)
# A fleet map of more nodes than this shows each farm's counts, its cells loaded when it is opened.
MAP_CELLS_INLINE_NODES = env_int("MAP_CELLS_INLINE_NODES", 1000, minimum=0)
# Seconds between fleet watches (every registered node read again, a page at a time); 0 turns it off.
FLEET_WATCH_EVERY = env_int("FLEET_WATCH_EVERY", 300, minimum=0)
if 0 < FLEET_WATCH_EVERY < 10:
    raise ImproperlyConfigured(f"FLEET_WATCH_EVERY must be 0 (off) or 10 seconds or more, not {FLEET_WATCH_EVERY}")
CELERY_BEAT_SCHEDULE = {
    "reap-stale-jobs": {"task": "dashboard.jobs_reap", "schedule": env_float("JOB_REAP_EVERY", 30.0, minimum=1.0)},
    "evaluate-alerts": {"task": "dashboard.alerts_evaluate", "schedule": env_float("ALERT_EVERY", 60.0, minimum=5.0)},
    # The farm totals of farms written outside the services (by hand, a raw UPDATE): the services
    # refresh them on commit already (figures.services.farm_totals); until then readers sum such a farm live.
    "refresh-farm-totals": {
        "task": "dashboard.farm_totals_refresh",
        "schedule": env_float("FARM_TOTALS_EVERY", 60.0, minimum=1.0),
    },
    # The fleet watch (nodes.services.watch): every registered node read again, unless FLEET_WATCH_EVERY is 0.
    **(
        {"fleet-watch": {"task": "dashboard.fleet_watch", "schedule": float(FLEET_WATCH_EVERY)}}
        if FLEET_WATCH_EVERY
        else {}
    ),
    # Capacity over time: a snapshot of the fleet's, farms' and nodes' figures, then the thinning.
    "snapshot-figures": {
        "task": "dashboard.figures_snapshot",
        "schedule": env_float("SNAPSHOT_EVERY", 900.0, minimum=10.0),
    },
}
# Withhold windows (nodes.services.withholds) open and end by themselves: the beat copies the window in force
# onto each node whose window opened or ended since (and refreshes its figures) every this many seconds.
# Lessons never outlive the observations that taught them (lessons.services.lesson_evidence.memory_lessons_follow):
# a group whose lesson rests on an observation aged past OBSERVATION_MAX_AGE_DAYS is fitted again this often.
# It also refreshes the figures of a build whose deployments ZOS took changed since the last follow (one
# taken, or aged out of the belief): their odds rest on them.
MEMORY_LESSONS_FOLLOW_EVERY = env_float("MEMORY_LESSONS_FOLLOW_EVERY", 3600.0, minimum=10.0)
CELERY_BEAT_SCHEDULE["memory-lessons-follow"] = {
    "task": "dashboard.memory_lessons_follow",
    "schedule": MEMORY_LESSONS_FOLLOW_EVERY,
}
CELERY_BEAT_SCHEDULE["withhold-edges"] = {
    "task": "dashboard.withhold_edges",
    "schedule": env_float("WITHHOLD_EDGES_EVERY", 60.0, minimum=1.0),
}
# Quarantine: QUARANTINE_AFTER_FAILURES failures of cause unknown or validation on one node within
# QUARANTINE_WINDOW seconds withhold it automatically for QUARANTINE_FIRST_HOURS, doubling with each
# repeat (a quarantine of the node in the 30 days before) up to QUARANTINE_MAX_HOURS. 0 failures: off.
QUARANTINE_AFTER_FAILURES = env_int("QUARANTINE_AFTER_FAILURES", 3, minimum=0)
QUARANTINE_WINDOW = env_int("QUARANTINE_WINDOW", 3600, minimum=60)
QUARANTINE_FIRST_HOURS = env_int("QUARANTINE_FIRST_HOURS", 6, minimum=1)
QUARANTINE_MAX_HOURS = env_int("QUARANTINE_MAX_HOURS", 96, minimum=1)
# Failures that only one reporting account's word tells (no failure of the dashboard's own, no second
# account) quarantine at most this many nodes a day for that account: a `report` token alone cannot
# take the fleet off offer. 0: reports alone never quarantine.
QUARANTINE_REPORTS_NODES_PER_DAY = env_int("QUARANTINE_REPORTS_NODES_PER_DAY", 3, minimum=0)
if QUARANTINE_MAX_HOURS < QUARANTINE_FIRST_HOURS:
    raise ImproperlyConfigured(
        f"QUARANTINE_MAX_HOURS ({QUARANTINE_MAX_HOURS}) must be at least QUARANTINE_FIRST_HOURS ({QUARANTINE_FIRST_HOURS})"
    )
# The slice audit (catalogs.services.catalog_audit): every node's catalog against its live contracts. Nightly by
# default (0 turns it off); at most CATALOG_AUDIT_RATE contract requests a second (the proxy allows
# 20 a second per client IP, shared by every process), all within CATALOG_AUDIT_DEADLINE seconds,
# and within the task's soft time limit less a minute (a job killed by it would keep nothing it read):
# 10 a second for 540 s reads 5,400 nodes; past that, nodes are "not checked" (raise both limits);
# with CATALOG_AUDIT_AUTOFIX the scheduled run fixes what it finds instead of only listing it.
CATALOG_AUDIT_EVERY = env_float("CATALOG_AUDIT_EVERY", 86400.0, minimum=0.0)
CATALOG_AUDIT_RATE = env_float("CATALOG_AUDIT_RATE", 10.0, minimum=0.1)
CATALOG_AUDIT_DEADLINE = env_float("CATALOG_AUDIT_DEADLINE", 540.0, minimum=1.0)
CATALOG_AUDIT_AUTOFIX = env_bool("CATALOG_AUDIT_AUTOFIX", False)
# A node whose used capacity moved with no outcome reported (a node event the watch sees) is audited then.
CATALOG_AUDIT_ON_USED_MOVED = env_bool("CATALOG_AUDIT_ON_USED_MOVED", True)
# An orphan (a taken slice whose contract the proxy does not list) is freed only once taken longer
# ago than this: the proxy's indexer lags the chain. Two watch intervals (10 minutes with the watch off).
CATALOG_AUDIT_ORPHAN_GRACE = env_float("CATALOG_AUDIT_ORPHAN_GRACE", 2.0 * (FLEET_WATCH_EVERY or 300), minimum=0.0)
if CATALOG_AUDIT_EVERY > 0:
    CELERY_BEAT_SCHEDULE["catalog-audit"] = {"task": "dashboard.catalog_audit", "schedule": CATALOG_AUDIT_EVERY}

# --- Alerts (dashboard.alerts) --------------------------------------------------------
# Comma-separated apprise URLs (mailtos://, json://, tgram://, ...); none: no delivery, the banner still shows.
ALERT_URLS = env_list("ALERT_URLS", [])
# One delivery (to every URL) must finish within this many seconds, slow receivers included.
ALERT_DELIVERY_DEADLINE = env_float("ALERT_DELIVERY_DEADLINE", 15.0, minimum=0.1)
ALERT_STALE_CATALOG_AFTER = env_int("ALERT_STALE_CATALOG_AFTER", 86400, minimum=0)
ALERT_FAILED_SPIKE = env_int("ALERT_FAILED_SPIKE", 5, minimum=1)
ALERT_FAILED_WINDOW = env_int("ALERT_FAILED_WINDOW", 900, minimum=60)
# 90 s: with the heartbeat timeout, the banner shows within about 2 minutes of the worker stopping.
ALERT_QUEUED_WITHOUT_WORKER = env_int("ALERT_QUEUED_WITHOUT_WORKER", 90, minimum=30)
ALERT_READING_MAX_AGE = env_int("ALERT_READING_MAX_AGE", 86400, minimum=60)
# The node alerts (from the events the readings show): a node down this long, a wake asked for
# and not done this long, a hardware change this recent, free slices gone within this many days.
ALERT_NODE_DOWN_AFTER = env_int("ALERT_NODE_DOWN_AFTER", 1800, minimum=60)
ALERT_WAKE_AFTER = env_int("ALERT_WAKE_AFTER", 600, minimum=60)
ALERT_HARDWARE_CHANGED_FOR = env_int("ALERT_HARDWARE_CHANGED_FOR", 86400, minimum=60)
ALERT_RUN_OUT_DAYS = env_float("ALERT_RUN_OUT_DAYS", 14.0, minimum=0.0)
# Days within which a farm's free public IPv4s running out (on the trend of its stored readings) alerts,
# routed to the farm's owner (ALERT_FARM_URLS) as well as ALERT_URLS.
ALERT_IPS_RUN_OUT_DAYS = env_float("ALERT_IPS_RUN_OUT_DAYS", 7.0, minimum=0.0)
# Per-farm routes, beside ALERT_URLS: "FARM_ID=apprise-url" items, comma-separated; a farm's owner
# hears about that farm's alerts (node down, wake, hardware, running out) as well as ALERT_URLS.
ALERT_FARM_URLS: dict[int, list[str]] = {}
for _route in env_list("ALERT_FARM_URLS", []):
    _farm, _sep, _url = _route.partition("=")
    if not _sep or not _farm.strip().isdigit() or "://" not in _url:
        raise ImproperlyConfigured(
            "ALERT_FARM_URLS items must be FARM_ID=apprise-url (e.g. 4242=json://hooks.example.com/farm); "
            f"one is {_route.split('://', 1)[0]!r}..."
        )
    ALERT_FARM_URLS.setdefault(int(_farm.strip()), []).append(_url.strip())
if ALERT_FARM_URLS:
    # A route apprise cannot use would silently block that farm's alerts: stop here, naming it.
    import apprise as _apprise

    for _farm, _urls in ALERT_FARM_URLS.items():
        for _url in _urls:
            if not _apprise.Apprise().add(_url):
                raise ImproperlyConfigured(
                    f"ALERT_FARM_URLS: farm {_farm}'s route {_url.split('://', 1)[0]}://... is not an apprise URL "
                    "apprise can use (see https://github.com/caronc/apprise/wiki)"
                )
# Past this a node's capacity reading is too old to judge by: its figures show "uncertain".
READING_MAX_AGE_MINUTES = env_int("READING_MAX_AGE_MINUTES", 60, minimum=1)
# Nodes per GET /nodes page when reading farms (the proxy caps it; 1000 is the client's own limit).
GRID_PAGE_SIZE = env_int("GRID_PAGE_SIZE", 100, minimum=1)
# A paged read of the grid (a farm's nodes) stops after this many pages, whatever the proxy sends
# (one that ignores `page` or invents nodes would otherwise be read for ever), and an onboarding
# registers at most ONBOARD_MAX_NEW_NODES new nodes unless an admin confirms more (page or CLI).
GRID_MAX_PAGES = env_int("GRID_MAX_PAGES", 100, minimum=1)
ONBOARD_MAX_NEW_NODES = env_int("ONBOARD_MAX_NEW_NODES", 500, minimum=1)
# A reported outcome's `at` may lie at most this many days back (and 5 minutes ahead: clocks differ).
REPORT_MAX_AGE_DAYS = env_int("REPORT_MAX_AGE_DAYS", 30, minimum=1)
# A bulk re-register's plan made from a reading older than this many seconds is read again before
# it is applied (a batch whose page was read before a long run of one-by-one reads, say).
BULK_READING_MAX_AGE = env_int("BULK_READING_MAX_AGE", 300, minimum=1)
# Waves (a bulk re-register asked with waves; catalogs.services.reregister.waves): the canary's share of the
# stale nodes when no canary farm is named (percent, 0: no canary), the batch size after it, the
# refusals and failures allowed before the run pauses itself, and how long a paused run holds its
# worker waiting for an admin before it stops itself (after the batch in hand, nothing half-written).
WAVES_CANARY_SHARE = env_int("WAVES_CANARY_SHARE", 10, minimum=0)
WAVES_BATCH = env_int("WAVES_BATCH", 100, minimum=1)
WAVES_BUDGET = env_int("WAVES_BUDGET", 3, minimum=0)
WAVES_PAUSE_LIMIT = env_int("WAVES_PAUSE_LIMIT", 300, minimum=1)
# A bulk re-register over this many stale nodes waits for a second admin's approval (0: never).
BULK_APPROVAL_OVER = env_int("BULK_APPROVAL_OVER", 0, minimum=0)
# The longest a buyer may hold one free slice (POST /api/v1/holds ttl_seconds), seconds. The grid's
# farmerbot claims what it found for 30 minutes; so does the default.
HOLD_MAX_TTL = env_int("HOLD_MAX_TTL", 1800, minimum=1)
# A precheck that may answer from the stored reading re-reads one older than READING_MAX_AGE_MINUTES,
# within this many seconds in all (else it says the grid did not answer in time).
PRECHECK_REREAD_DEADLINE = env_float("PRECHECK_REREAD_DEADLINE", 15.0, minimum=0.1)
# Reconciliation (node page): the catalog, the proxy's `used` and the refusals' lessons disagree when
# they differ by more than this share of the node's total memory or SSD.
RECONCILE_TOLERANCE_PERCENT = env_int("RECONCILE_TOLERANCE_PERCENT", 5, minimum=0)

# --- The grid -------------------------------------------------------------------------
# The twin id(s) the marketplace deploys with (docs/configuration.md). Set, a node rented by another
# twin, or one the chain keeps for a renter (dedicated farm, extra fee) with no rent contract of ours,
# offers nothing (capacity.closures). Unset: rent contracts are not judged (the fleet page says so).
MARKETPLACE_TWIN_ID = env_ids("MARKETPLACE_TWIN_ID")
GRID_BACKEND = env_choice("GRID_BACKEND", "simulator", ("simulator", "gridproxy"))
# The simulated world is named, never imported, by the product (sim/: the grid, the month of traffic).
SIMULATED_GRID = "sim.grid.grid_from_settings"
# Its RMB, when RMB_REDIS_URL is unset: the simulated nodes' answers read by the production door's parser.
SIMULATED_RMB = "sim.grid.rmb_loopback.rmb_from_settings"
POLICY_TRIAL_MONTH = "sim.month"
GRID_PROXY_URL = env_str("GRID_PROXY_URL", "https://gridproxy.grid.tf")
GRID_CONNECT_TIMEOUT = env_float("GRID_CONNECT_TIMEOUT", 3.05, minimum=0.01)
GRID_READ_TIMEOUT = env_float("GRID_READ_TIMEOUT", 10.0, minimum=0.01)
GRID_RETRIES = env_int("GRID_RETRIES", 3, minimum=0)
GRID_BACKOFF = env_float("GRID_BACKOFF", 0.5, minimum=0.0)
# Wall-clock budgets: one Grid Proxy request in all (tries, back-off and a slow answer included),
# and one job step that reads the grid (a re-register's read with its whole-read retries).
GRID_DEADLINE = env_float("GRID_DEADLINE", 30.0, minimum=0.1)
GRID_STEP_DEADLINE = env_float("GRID_STEP_DEADLINE", 90.0, minimum=0.1)
# A statistics read goes through the relay to the node itself, and the proxy gives it 30 s.
GRID_STATISTICS_DEADLINE = env_float("GRID_STATISTICS_DEADLINE", 30.0, minimum=0.1)
# One request budget for every process (grid/budget.py): at most this many Grid Proxy requests in
# any 1 s window (the proxy allows 20 per client IP), of which background work (the watch, bulk
# jobs) leaves GRID_RATE_RESERVE to interactive requests (prechecks, a page's click).
GRID_RATE_LIMIT = env_int("GRID_RATE_LIMIT", 15, minimum=1)
GRID_RATE_RESERVE = env_int("GRID_RATE_RESERVE", 3, minimum=0)
if GRID_RATE_RESERVE >= GRID_RATE_LIMIT:
    raise ImproperlyConfigured(
        f"GRID_RATE_RESERVE ({GRID_RATE_RESERVE}) must be less than GRID_RATE_LIMIT ({GRID_RATE_LIMIT}): "
        "background work would have no request left"
    )
SIMGRID_PATH = Path(env_str("SIMGRID_PATH", str(VAR_DIR / "simgrid.sqlite3"))).resolve()
# --- RMB: the nodes' own answers, through rmb-peer (grid/rmb/, docs/production.md) --------
# The Redis an rmb-peer serves for the marketplace's twin; unset, nothing asks a node over RMB and
# pools come from reports only (the simulated grid answers through its loopback, SIMULATED_RMB).
RMB_REDIS_URL = env_str("RMB_REDIS_URL", "")
if RMB_REDIS_URL and not RMB_REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"RMB_REDIS_URL must be a redis://, rediss:// or unix:// URL, not {RMB_REDIS_URL!r}")
# Seconds one call waits for its answer (also sent as its `exp`): a node off or unreachable never answers.
RMB_DEADLINE = env_float("RMB_DEADLINE", 10.0, minimum=0.1)
# The RMB budget every process shares (in the peer's Redis): calls sent in any 1 s window, of
# which background work leaves RMB_RATE_RESERVE to interactive calls, and calls awaiting an answer.
# The relay limits each twin's messages in a window; keep these under it.
RMB_RATE_LIMIT = env_int("RMB_RATE_LIMIT", 10, minimum=1)
RMB_RATE_RESERVE = env_int("RMB_RATE_RESERVE", 2, minimum=0)
if RMB_RATE_RESERVE >= RMB_RATE_LIMIT:
    raise ImproperlyConfigured(
        f"RMB_RATE_RESERVE ({RMB_RATE_RESERVE}) must be less than RMB_RATE_LIMIT ({RMB_RATE_LIMIT}): "
        "background work would have no call left"
    )
RMB_MAX_IN_FLIGHT = env_int("RMB_MAX_IN_FLIGHT", 50, minimum=1)
# Pools heard longer ago than this many hours are asked again by the fleet watch (with RMB on).
POOLS_MAX_AGE = env_int("POOLS_MAX_AGE", 24, minimum=1)
# --- What ZOS's refusals teach (lessons.services.observations, lessons.services.memory_model, docs/zos.md) ----
# Days an observation counts; it stays on file after.
OBSERVATION_MAX_AGE_DAYS = env_int("OBSERVATION_MAX_AGE_DAYS", 30, minimum=1)
# Reports that teach (a memory or disk refusal, a probe) are bounded in time, as quarantine bounds what
# one account's reports may withhold: past LESSON_REPORTS_PER_TOKEN from one token, or
# LESSON_REPORTS_PER_BUILD on the nodes of one ZOS build, within LESSON_REPORTS_WINDOW seconds, a report
# is refused (429) and an alert fires. 0: no bound.
LESSON_REPORTS_WINDOW = env_int("LESSON_REPORTS_WINDOW", 3600, minimum=60)
LESSON_REPORTS_PER_TOKEN = env_int("LESSON_REPORTS_PER_TOKEN", 30, minimum=0)
LESSON_REPORTS_PER_BUILD = env_int("LESSON_REPORTS_PER_BUILD", 120, minimum=0)
# A probe's refusal counts as a probe (the product's own question answered) only on a node the probe
# list proposed within this many hours before it; elsewhere it is taken as a plain report.
PROBE_WINDOW_HOURS = env_int("PROBE_WINDOW_HOURS", 6, minimum=1)
# Standard deviations a build's fitted line is raised by for the carve and the precheck.
MEMORY_MODEL_MARGIN_SD = env_float("MEMORY_MODEL_MARGIN_SD", 1.0, minimum=0.0)
# The odds (capacity.odds) a free slice must have of deploying at the first try for "deployable" and
# "placeable now" to count it: a headline never promises what is a guess.
SLICE_MIN_ODDS = env_float("SLICE_MIN_ODDS", 0.95, minimum=0.0)
if SLICE_MIN_ODDS > 1:
    raise ImproperlyConfigured(f"SLICE_MIN_ODDS is a probability, from 0 to 1 (got {SLICE_MIN_ODDS})")
# The largest full-VM image the marketplace deploys, GiB (0: not judged): a node whose zos-cache quota is
# below it is warned of (capacity.warnings "cache-small"; zos#2147 saw a full Ubuntu 22.04 VM refused with
# "disk quota exceeded" on a 10 GiB cache).
FULL_VM_IMAGE_SRU = env_int("FULL_VM_IMAGE_GIB", 10, minimum=0) * 1024**3

# --- Auth and security ----------------------------------------------------------------
# Login throttling (django-axes): a username guessed wrong this often from one address is locked
# out for the cool-off; a good login resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Cuts the username to the 255 characters axes stores; the login forms refuse longer ones first.
AXES_USERNAME_CALLABLE = "dashboard.views.auth.axes_username"
AXES_RESET_ON_SUCCESS = True
# Its start-up banner would be a second line on every command's stderr.
AXES_VERBOSE = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Named on the page a signed-in account in no group gets: whom to ask for access.
ACCESS_REQUEST_CONTACT = env_str("ACCESS_REQUEST_CONTACT", "") or "a superuser of this dashboard"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_TLS_PROXY", False) else None
SESSION_COOKIE_HTTPONLY = True
# A session ends this long after the login (default 12 h), or after this long without a request
# (default 2 h); dashboard.views.middleware.SessionExpiry enforces both.
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 3600, minimum=60)
SESSION_IDLE_TIMEOUT = env_int("SESSION_IDLE_TIMEOUT", 2 * 3600, minimum=60)
X_FRAME_OPTIONS = "DENY"

# No inline script or style anywhere: htmx is configured with allowEval off (base template).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'self'"],
    }
}

# --- API and metrics -----------------------------------------------------------------
# Requests per API token, "N/s", "N/m", "N/h" or "N/d"; past it the API answers 429 with Retry-After.
API_THROTTLE_RATE = env_str("API_THROTTLE_RATE", "600/m")
if not re.fullmatch(r"\d+/(s|sec|m|min|h|hour|d|day)", API_THROTTLE_RATE):
    raise ImproperlyConfigured(f"API_THROTTLE_RATE={API_THROTTLE_RATE!r} is not a rate; write e.g. 600/m or 20/s")
# The throttle's counts. Without CACHE_URL they live in each web process's memory, so with
# gunicorn -w 4 a token gets up to four times the rate; CACHE_URL=redis://... shares them.
CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"CACHE_URL={CACHE_URL!r} must be a redis:// URL (or unset for per-process memory)")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "default"},
    # The fleet map's rendered cells, one entry a farm and state (figures.selectors.fleet_map); each process its own.
    "fleet-map": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "fleet-map",
        "OPTIONS": {"MAX_ENTRIES": 20_000},
    },
    "api-throttle": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL, "KEY_PREFIX": "slicedash"}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api-throttle"}
    ),
}
# The bearer token Prometheus sends to /metrics; unset, /metrics answers 404.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
if METRICS_TOKEN and len(METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("METRICS_TOKEN must be at least 16 characters (or unset to turn /metrics off)")

# --- Static, i18n, logging ------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "forbidden_on_one_line": {"()": "config.log_filters.ForbiddenOnOneLine"},
        "no_hostname_noise": {"()": "config.log_filters.NoHostnameNoise"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        # Filters sit on the loggers (not the handler) so that records reach every handler already
        # shaped: pytest's caplog included.
        "django.request": {"filters": ["forbidden_on_one_line"]},
        "kombu.connection": {"filters": ["no_hostname_noise"]},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
