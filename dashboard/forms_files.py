"""The file page's form: a new directory's name (the file service checks the rest)."""

from __future__ import annotations

from django import forms

from paddlecloud_core.layout import MAX_COMPONENT


class MkdirForm(forms.Form):
    name = forms.CharField(max_length=MAX_COMPONENT, label="New folder",
                           widget=forms.TextInput(attrs={"placeholder": "folder name",
                                                         "autocomplete": "off"}))

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if "/" in name:
            raise forms.ValidationError("one name, without '/': create one folder at a time")
        return name
