"""test_render.py: build/tierfs-render behaves as helm's engine does where
the chart relies on it, on a small chart made here: values merged from -f
files (deeply; null deletes), numbers read as float64, include / tpl /
required / toYaml / fromYaml, missing values empty, partials and NOTES.txt
not rendered as manifests, documents split on --- and sorted in helm's
install order, .Release / .Chart / .Capabilities filled in.
"""

import subprocess
import textwrap

import pytest
import yaml

from gen_manifests import renderer


@pytest.fixture
def mini(tmp_path):
    c = tmp_path / "mini"
    (c / "templates").mkdir(parents=True)
    (c / "Chart.yaml").write_text(textwrap.dedent("""\
        apiVersion: v2
        name: mini
        version: 1.2.3
        appVersion: "9.9"
        kubeVersion: ">=1.20.0-0"
    """))
    (c / "values.yaml").write_text(textwrap.dedent("""\
        big: 10000000
        keep: {a: 1, b: 2}
        drop: {x: 1}
        name: base
        tplText: "{{ .Values.name }}-{{ .Release.Name }}"
    """))
    (c / "templates" / "_helpers.tpl").write_text(
        '{{- define "mini.name" -}}{{ .Values.name }}-x{{- end -}}\n'
        "kind: NotRendered\n")
    (c / "templates" / "NOTES.txt").write_text("notes for {{ .Release.Name }}\n")
    (c / "templates" / "a.yaml").write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {{ include "mini.name" . }}
          namespace: {{ .Release.Namespace }}
        data:
          big: "{{ .Values.big }}"
          tpl: {{ tpl .Values.tplText . }}
          missing: "{{ .Values.nothing }}"
          chart: {{ .Chart.Name }}-{{ .Chart.Version }}-{{ .Chart.AppVersion }}
          service: {{ .Release.Service }}
          kube: {{ .Capabilities.KubeVersion.Version }}
          minor: "{{ .Capabilities.KubeVersion.Minor }}"
          hasApi: {{ .Capabilities.APIVersions.Has "x.dev/v1" }}
          keep:
            {{- toYaml .Values.keep | nindent 4 }}
          fromYaml: {{ (fromYaml "q: [1, 2]").q | len }}
          hasDrop: {{ hasKey .Values "drop" }}
        ---
        apiVersion: v1
        kind: Namespace
        metadata:
          name: ns
        ---
    """))
    return c


def run(chart, *args):
    return subprocess.run([renderer(), "--chart", str(chart), *args],
                          capture_output=True, text=True)


def docs(out):
    return [yaml.safe_load(p.partition("\n")[2])
            for p in out.split("---\n# Source: ")[1:]]


def test_renders_like_helm(mini, tmp_path):
    over = tmp_path / "over.yaml"
    over.write_text("keep: {b: 3, c: 4}\ndrop: null\nname: over\n")
    p = run(mini, "-f", str(over), "--name", "rel", "--namespace", "space",
            "--kube-version", "v1.29.3", "--api-versions", "x.dev/v1")
    assert p.returncode == 0, p.stderr
    d = docs(p.stdout)
    assert [x["kind"] for x in d] == ["Namespace", "Deployment"], \
        "helm's install order, and no document from _helpers.tpl"
    data = d[1]["data"]
    assert d[1]["metadata"] == {"name": "over-x", "namespace": "space"}
    assert data["big"] == "1e+07", "helm reads numbers as float64"
    assert data["tpl"] == "over-rel"
    assert data["missing"] == ""
    assert data["chart"] == "mini-1.2.3-9.9"
    assert data["service"] == "Helm"
    assert data["kube"] == "v1.29.3" and data["minor"] == "29"
    assert data["hasApi"] is True
    assert data["keep"] == {"a": 1, "b": 3, "c": 4}, "maps merge deeply"
    assert data["fromYaml"] == 2
    assert data["hasDrop"] is False, "a null in -f deletes the key"
    assert "notes for" not in p.stdout


def test_notes_are_rendered_on_request(mini):
    p = run(mini, "--notes", "--name", "r1")
    assert p.returncode == 0 and p.stdout == "notes for r1\n"


def test_required_and_fail_stop_the_render(mini):
    (mini / "templates" / "b.yaml").write_text(
        '{{ required "b.thing is required" .Values.b }}\n')
    p = run(mini)
    assert p.returncode == 1 and "b.thing is required" in p.stderr


def test_env_is_not_a_function_as_in_helm(mini):
    (mini / "templates" / "c.yaml").write_text('x: {{ env "HOME" }}\n')
    p = run(mini)
    assert p.returncode == 1 and '"env" not defined' in p.stderr


def test_kube_version_constraint_is_enforced(mini):
    p = run(mini, "--kube-version", "v1.19.0")
    assert p.returncode == 1 and "incompatible" in p.stderr


def test_invalid_yaml_output_is_an_error(mini):
    (mini / "templates" / "d.yaml").write_text("a: [unclosed\n")
    p = run(mini)
    assert p.returncode == 1 and "does not parse" in p.stderr
