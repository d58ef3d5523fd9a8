"""What the tools share: run pytest with one of them as a plugin, each worker writing its lines
to its own file in a temporary folder, and read the lines back."""

import os
import subprocess
import sys
import tempfile


def run_logged(plugin: str, log_folder_variable: str, argv: list[str], cold: bool):
    """Run `python -m pytest -q -p no:randomly -p PLUGIN ARGV` with `$LOG_FOLDER_VARIABLE`
    naming a fresh folder (and the test compile cache off when `cold`).

    **Returns:** `(return code, the lines every process wrote there)`."""
    with tempfile.TemporaryDirectory() as folder:
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        env[log_folder_variable] = folder
        if cold:
            env["BLAMEJAX_TEST_COMPILE_CACHE"] = "off"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", plugin]
        done = subprocess.run(command + argv, env=env)
        lines = []
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name)) as file:
                lines += file.read().splitlines()
    return done.returncode, lines
