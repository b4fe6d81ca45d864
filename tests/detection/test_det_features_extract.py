"""extract_features.py and visualize.py on a detection run's weights refused them ('is a detection checkpoint, not a
classifier's'), where export_onnx.py --features exports its backbone's levels: they now give those levels, through
the run's per-level norms, at its mean, std and test size."""

from run_featureskit import check_run_features


def test_extract_features_and_visualize_take_a_detection_run(trained, tmp_path, capsys):
    check_run_features(trained[1] / "best.safetensors", "detection", tmp_path, capsys)
