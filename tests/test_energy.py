"""RAPL domains: a laptop's psys domain (the whole platform) is not added on top of the packages."""

from __future__ import annotations

from course_lib.benchmark import energy


def test_psys_is_not_counted_twice(tmp_path):
    for domain, name, uj in (
        ("intel-rapl:0", "package-0", 3_000_000),
        ("intel-rapl:1", "psys", 9_000_000),
        ("intel-rapl:0:0", "core", 1_000_000),
    ):
        d = tmp_path / domain
        d.mkdir()
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")
    assert [p.name for p in energy._rapl_domains(tmp_path)] == ["intel-rapl:0"]
    assert energy._read_rapl(tmp_path) == {"intel-rapl:0": (3_000_000, 262143328850)}


def test_nvidia_smi_is_asked_for_the_gpu_by_uuid_where_torch_knows_it(monkeypatch):
    class Props:
        uuid = "6e3b9a1c-0000-1111-2222-333344445555"

    monkeypatch.setattr(energy.torch.cuda, "get_device_properties", lambda i: Props())
    assert energy._nvidia_smi_id(0) == "GPU-6e3b9a1c-0000-1111-2222-333344445555"
    monkeypatch.setattr(energy.torch.cuda, "get_device_properties", lambda i: (_ for _ in ()).throw(RuntimeError()))
    assert energy._nvidia_smi_id(1) == "1"
