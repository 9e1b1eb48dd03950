"""The policy history: every version of every policy (support reads it); admins revert to one, previewed first."""

from django.shortcuts import render

from dashboard.policies.selectors.policy_history import policy_history
from dashboard.views.page import page
from dashboard.views.policy import size_text


@page("dashboard.view_policy")
def policy_history_page(request):
    history = policy_history()
    # A revert posts the old version's values to the edit page, which previews them before any save.
    for policy in history:
        for line in policy.lines:
            line.form_values = {
                key: size_text(value)
                if isinstance(value, int) and key not in ("slice_cru", "reserve_mru_percent")
                else value
                for key, value in line.entry.parameters.items()
            }
            # The history keeps the capacity parameters only: a revert keeps what the slices carry now
            # (an unticked box is not posted, so only the ticked ones go).
            if policy.policy is not None:
                line.form_values["public_ipv4"] = str(policy.policy.public_ipv4)
                line.form_values |= {
                    flag: "on" for flag in ("ipv4_addon", "gpu_slices") if getattr(policy.policy, flag)
                }
    return render(request, "dashboard/policy_history.html", {"section": "policy", "history": history})
