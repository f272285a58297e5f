"""The one line every lmms test skips with when lmms-eval is absent (the tiny $HF_HOME they read is
:mod:`infinipotv.data.toy_lmms`)."""

NO_LMMS = (
    "lmms-eval is not installed in this environment: these tests run in their own venv, "
    "bash tests/lmms/run_lmms_ci.sh (creates .venv-lmms with pip install .[lmms])"
)
