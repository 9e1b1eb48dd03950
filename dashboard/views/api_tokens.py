"""API tokens, for admins: who holds which, made here (shown once) and revoked here."""

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required, permission_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from dashboard.access.services.tokens import MAX_EXPIRES_DAYS, TokenError, api_token_create, api_token_revoke
from dashboard.models import ApiToken
from dashboard.views.action import action


class TokenForm(forms.Form):
    user = forms.ModelChoiceField(queryset=get_user_model().objects.none())
    name = forms.CharField(max_length=80, help_text="e.g. the program that will use it: marketplace, prometheus")
    scopes = forms.MultipleChoiceField(choices=ApiToken.Scope.choices, widget=forms.CheckboxSelectMultiple)
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_EXPIRES_DAYS, label="Expires after (days)", help_text="empty: never"
    )

    def __init__(self, *args, maker, **kwargs):
        super().__init__(*args, **kwargs)
        # A token is made for oneself, or by a superuser for anyone (access.services.tokens refuses the rest too).
        users = get_user_model().objects.filter(is_active=True).order_by("username")
        self.fields["user"].queryset = users if maker.is_superuser else users.filter(pk=maker.pk)
        self.fields["user"].initial = maker.pk
        if not maker.is_superuser:
            self.fields["user"].help_text = "tokens are made for yourself; a superuser can make one for someone else"


@login_required
@permission_required("dashboard.manage_apitoken", raise_exception=True)
@require_http_methods(["GET", "POST"])
def token_list(request):
    form = TokenForm(request.POST or None, maker=request.user)
    issued = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                issued = api_token_create(
                    user=form.cleaned_data["user"],
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    expires_days=form.cleaned_data["expires_days"],
                    by=request.user,
                    source="web",
                )
                form = TokenForm(maker=request.user)
            except TokenError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        if issued is None:
            status = 400
    now = timezone.now()
    tokens = [
        (token, token.is_usable(now)) for token in ApiToken.objects.select_related("user", "created_by", "revoked_by")
    ]
    context = {"section": "api-tokens", "form": form, "issued": issued, "tokens": tokens}
    return render(request, "dashboard/api_tokens.html", context, status=status)


@action("dashboard.manage_apitoken")
def token_revoke(request, token_id: int):
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_id)
    if api_token_revoke(token=token, by=request.user, source="web"):
        messages.success(request, f"Revoked {token.prefix}… ({token.name}) of {token.user.get_username()}.")
    else:
        messages.warning(request, f"{token.prefix}… ({token.name}) was revoked already.")
    return redirect("api-tokens")
