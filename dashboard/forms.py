"""The submit form: each field of the table (``paddlecloud_core.spec.FIELDS``) that has a label,
as the table describes it, sent to ``jobs.services.job_submit`` as typed. The rules live in
``jobs.spec``; this form only collects the values and turns the env lines into a mapping
(``dashboard.service_errors`` puts the service's messages beside the fields)."""

from __future__ import annotations

from django import forms

from paddlecloud_core.spec import FIELDS, Field, priority_name


def form_field(f: Field) -> forms.Field:
    """The form's field for a field of the table (``paddlecloud_core.spec.FIELDS``)."""
    attrs = dict(f.attrs)
    if f.placeholder and f.widget != "select":
        attrs["placeholder"] = f.placeholder
    shared = {"label": f.label, "required": False, "help_text": f.help}
    if f.widget == "select":  # registry's choices are the user's, set by the form
        choices = list(f.choices)
        if f.placeholder:
            choices.insert(0, ("", f.placeholder))
        initial = priority_name(f.default) if f.type == "priority" else None
        choices.sort(key=lambda choice: choice[0] != initial)  # the default first, chosen
        return forms.ChoiceField(choices=choices, initial=initial, **shared)
    if f.widget == "lines":
        return forms.CharField(widget=forms.Textarea(attrs={"rows": 3, **attrs}),
                               **{**shared, "help_text": f"{f.help}, one a line"})
    if f.widget == "number":
        # Kept as text: jobs.spec says what is wrong with a value, in the same words as the API.
        return forms.CharField(widget=forms.NumberInput(
            attrs={"step": 1, "min": f.minimum, **attrs}), **shared)
    return forms.CharField(widget=forms.TextInput(attrs=attrs), **shared)


_ON_FORM = [f for f in FIELDS if f.label]


# A placeholder is an example ("e.g. ...") or a default ("default: ..."), never a bare value,
# which reads as one typed in; the help text under a field gives the other defaults.
_TableFields = type("_TableFields", (forms.Form,), {
    "__module__": __name__, **{f.name: form_field(f) for f in _ON_FORM}})


class JobSubmitForm(_TableFields):
    # The fieldsets of the page, in the table's order.
    GROUPS = tuple((group, tuple(f.name for f in _ON_FORM if f.group == group))
                   for group in dict.fromkeys(f.group for f in _ON_FORM))

    def __init__(self, *args, registries=(), default_image: str = "", **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["registry"].choices = [("", "none (a public image)")] + [
            (name, name) for name in registries]
        if default_image:
            self.fields["image"].widget.attrs["placeholder"] = f"default: {default_image}"

    def groups(self):
        """(legend, bound fields) for each fieldset of the page."""
        return [(legend, [self[name] for name in names]) for legend, names in self.GROUPS]

    def submission(self) -> dict:
        """What ``job_submit`` takes: the values as typed, empty ones left out (the service's
        defaults apply). The form's own mistakes (a malformed env line, a choice not offered)
        go on the form, and the rest is still returned, so that the service's checks can show
        every other mistake beside them at once."""
        self.is_valid()
        data = {key: value.strip() for key, value in self.cleaned_data.items()
                if key != "env" and value and value.strip()}
        env = self._env(self.cleaned_data.get("env", ""))
        if env:
            data["env"] = env
        return data

    def _env(self, text: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                self.add_error("env", f"line {number}: write KEY=VALUE, not {line!r}")
                continue
            env[key.strip()] = value
        return env
