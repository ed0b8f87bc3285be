"""The browser's login forms — the dashboard's and the admin's — whose passwords are checked
by ``accounts.authentication.PasswordBackend``, behind the same counters as the token
endpoint's."""

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm

from kernel.errors import ThrottledError

from .sso import sso_only


class ThrottledAuthenticationForm(AuthenticationForm):
    """Django's login form, saying why a login is refused: too many failures (the backend's
    ThrottledError, as an error of the form), or a user of single sign-on without a
    password."""

    def clean(self):
        username = self.cleaned_data.get("username")
        try:
            return super().clean()  # a wrong password raises: the attempt stays counted
        except ThrottledError as exc:
            raise forms.ValidationError(exc.message, code="throttled") from None
        except forms.ValidationError:
            user = get_user_model().objects.filter(username=username).first()
            if user is not None and sso_only(user):
                raise forms.ValidationError(
                    f"{username} logs in with single sign-on and has no password: use the "
                    f"“Log in with {settings.PADDLECLOUD_OIDC_PROVIDER_NAME}” button",
                    code="sso_user") from None
            raise


class ThrottledAdminAuthenticationForm(ThrottledAuthenticationForm, AdminAuthenticationForm):
    """The admin's login form (staff only), refused the same way."""
