from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard.api.main import api
from dashboard.views import (
    alerts,
    api_tokens,
    catalog_audit,
    deployments,
    favicon,
    fleet,
    jobs,
    lessons,
    metrics,
    node,
    onboarding,
    placement,
    policy,
    policy_history,
    probes,
    waves,
    withholds,
)
from dashboard.views.auth import LoginForm

urlpatterns = [
    path("", fleet.overview, name="fleet"),
    path("export.csv", fleet.export_csv, name="fleet-export"),
    path("map/", fleet.map_view, name="fleet-map"),
    path("fleet/reregister-stale/", fleet.reregister_stale, name="fleet-reregister-stale"),
    path("nodes/add/", onboarding.onboard, name="onboard"),
    path("nodes/add/<int:job_id>/", onboarding.onboard_job, name="onboard-job"),
    path("nodes/<int:node_id>/", node.detail, name="node"),
    path("nodes/<int:node_id>/catalog/", node.catalog, name="node-catalog"),
    path("nodes/<int:node_id>/events/", node.events, name="node-events"),
    path("nodes/<int:node_id>/reregister/", node.reregister, name="node-reregister"),
    path("nodes/<int:node_id>/preview/", node.preview, name="node-preview"),
    path("nodes/<int:node_id>/precheck/", node.precheck, name="node-precheck"),
    path("nodes/<int:node_id>/observations/clear/", node.observations_clear_view, name="node-observations-clear"),
    path(
        "nodes/<int:node_id>/memory-lessons/<int:lesson_id>/revert/",
        node.memory_lesson_revert_view,
        name="node-memory-lesson-revert",
    ),
    path("nodes/<int:node_id>/pools/", node.pools_report_view, name="node-pools"),
    path("nodes/<int:node_id>/withhold/", withholds.withhold, name="node-withhold"),
    path("nodes/<int:node_id>/withhold/panel/", withholds.panel, name="node-withhold-panel"),
    path("nodes/<int:node_id>/withhold/release/", withholds.release, name="node-withhold-release"),
    path("farms/<int:farm_id>/withhold/", withholds.farm_withhold, name="farm-withhold"),
    path("deployments/failed/", deployments.failed, name="deployments-failed"),
    path("placement/", placement.placement, name="placement"),
    path("probes/", probes.probe_list, name="probes"),
    path("lessons/waiting/", lessons.waiting, name="lessons-waiting"),
    path("lessons/observations/<int:observation_pk>/apply/", lessons.apply, name="lesson-observation-apply"),
    path("lessons/observations/<int:observation_pk>/drop/", lessons.drop, name="lesson-observation-drop"),
    path("audit/", catalog_audit.audit_page, name="audit"),
    path("audit/run/", catalog_audit.audit_run, name="audit-run"),
    path("audit/fix/", catalog_audit.audit_fix, name="audit-fix"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:job_id>/", jobs.job_page, name="job"),
    path("jobs/<int:job_id>/progress/", jobs.job_progress, name="job-progress"),
    *(
        path(f"jobs/<int:job_id>/waves/{action}/", waves.waves_action, {"action": action}, name=f"job-waves-{action}")
        for action in waves.ACTIONS
    ),
    path("jobs/<int:job_id>/rollback/", waves.job_rollback, name="job-rollback"),
    path("jobs/<int:job_id>/rollback/<int:node_id>/", waves.node_rollback_view, name="job-node-rollback"),
    path("policy/", policy.policy_list, name="policy"),
    path("policy/new/", policy.policy_new, name="policy-new"),
    path("policy/history/", policy_history.policy_history_page, name="policy-history"),
    path("policy/<int:policy_id>/edit/", policy.policy_edit, name="policy-edit"),
    path("policy/<int:policy_id>/trial/", policy.policy_trial, name="policy-trial"),
    path("policy/new/trial/", policy.policy_new_trial, name="policy-new-trial"),
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=False, authentication_form=LoginForm),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("alerts/", alerts.alert_list, name="alerts"),
    path("alerts/<int:alert_id>/acknowledge/", alerts.acknowledge, name="alert-acknowledge"),
    path("api-tokens/", api_tokens.token_list, name="api-tokens"),
    path("api-tokens/<int:token_id>/revoke/", api_tokens.token_revoke, name="api-token-revoke"),
    path("api/v1/", api.urls),
    path("metrics", metrics.metrics, name="metrics"),
    path("metrics/farms", metrics.metrics_farms, name="metrics-farms"),
    path("admin/", admin.site.urls),
    path("favicon.ico", favicon.favicon, name="favicon"),
]

handler403 = "dashboard.views.errors.permission_denied"
