"""The submit form: every flag of ``paddlectl submit``, sent to ``jobs.services.job_submit`` as
typed. The rules live in ``jobs.spec``; this form only collects the values and turns the env
lines into a mapping (``dashboard.service_errors`` puts the service's messages beside the
fields)."""

from __future__ import annotations

from django import forms


def _text(label: str, help_text: str = "", **attrs) -> forms.CharField:
    return forms.CharField(label=label, required=False, help_text=help_text,
                           widget=forms.TextInput(attrs=attrs))


def _number(label: str, help_text: str = "", **attrs) -> forms.CharField:
    # Kept as text: jobs.spec says what is wrong with a value, in the same words as the API.
    return forms.CharField(label=label, required=False, help_text=help_text,
                           widget=forms.NumberInput(attrs={"step": 1, **attrs}))


# A placeholder is an example ("e.g. ...") or a default ("default: ..."), never a bare value,
# which reads as one typed in; the help text under a field gives the other defaults.
class JobSubmitForm(forms.Form):
    name = _text("Name", "lower-case letters, digits and '-', at most 40 characters",
                 placeholder="e.g. fit-a-line", autocomplete="off", spellcheck="false")
    package = _text("Trainer package", "a directory in PFS: pick one of your home or type "
                    "a path", list="package-dirs", spellcheck="false")
    entry = _text("Entry command", "what starts a replica", placeholder="e.g. python train.py",
                  spellcheck="false")
    priority = forms.ChoiceField(
        label="Priority", required=False, initial="normal",
        choices=[("normal", "normal"), ("high", "high"), ("low", "low")],
        help_text="its place among your waiting jobs: high ones start before normal ones, "
                  "low ones after; others' jobs are not passed")
    image = _text("Image", "the runtime image; empty: the datacenter's", spellcheck="false")
    registry = forms.ChoiceField(label="Registry credentials", required=False,
                                 help_text="for a private image")
    trainers = _text("Trainers", "how many (the seeds' -parallelism, default 1), or a "
                     "range MIN:MAX for elastic trainers: added as your quota has room, "
                     "replaced when lost (with parameter servers and a dataset)",
                     placeholder="e.g. 2, or 2:4", inputmode="text", spellcheck="false",
                     autocomplete="off")
    trainers_lost_limit = _number("Trainers lost at most", "elastic trainers: how many the job "
                                  "may lose (each replaced) before it fails; default MAX",
                                  min=0)
    trainers_below_min_seconds = _number("Below MIN at most (seconds)", "elastic trainers: how "
                                         "long it may run with fewer than MIN before it fails "
                                         "(default 300)", min=1)
    cpu = _text("CPU per trainer", "1, 0.5 or 500m (default 1)")
    memory = _text("Memory per trainer", "1Gi, 512Mi (default 1Gi)")
    gpu = _number("GPUs per trainer", "default 0", min=0)
    pservers = _number("Parameter servers", "none for collective jobs (default 0)", min=0)
    pscpu = _text("CPU per parameter server", "default 1")
    psmemory = _text("Memory per parameter server", "default 1Gi")
    passes = _number("Passes", "given as PADDLE_INIT_NUM_PASSES (default 1)", min=1)
    env = forms.CharField(
        label="Environment", required=False,
        help_text="one KEY=VALUE a line, for every replica",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false",
                                     "placeholder": "e.g. BATCH_SIZE=64"}))
    restart_limit = _number("Restart limit", "how often a failed trainer is restarted "
                            "(default 0)", min=0)
    deadline_seconds = _number("Deadline (seconds)", "fail the job if it runs longer", min=1)
    ttl_seconds_after_finished = _number("Keep after finish (seconds)",
                                         "delete the job this long after it ended", min=0)
    topology = _text("Topology", "a PaddlePaddle v1 config file in the package (legacy)",
                     spellcheck="false")
    dataset = _text("Dataset", "files in PFS the job's master hands to the trainers task by "
                    "task (paddlecloud_sdk.master.reader()); empty: no master",
                    placeholder="e.g. /pfs/{dc}/home/{user}/data/part-*.recordio",
                    autocomplete="off", spellcheck="false")
    dataset_unit = forms.ChoiceField(
        label="A task is", required=False,
        choices=[("", "default: a file (records with a task size)"), ("file", "a file"),
                 ("chunk", "a RecordIO chunk"), ("records", "a number of records")],
        help_text="how the dataset is cut into tasks")
    task_records = _number("Records a task", "records (or lines of a text file) a task "
                           "holds, for a number of records", min=1)

    GROUPS = (
        ("Job", ("name", "package", "entry", "priority")),
        ("Trainers", ("trainers", "cpu", "memory", "gpu", "trainers_lost_limit",
                      "trainers_below_min_seconds")),
        ("Parameter servers", ("pservers", "pscpu", "psmemory")),
        ("Runtime", ("image", "registry", "env", "passes", "restart_limit",
                     "deadline_seconds", "ttl_seconds_after_finished", "topology")),
        ("Data", ("dataset", "dataset_unit", "task_records")),
    )

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
