"""stepscope's start-up hook: put this directory on PYTHONPATH to profile a trainer with
no change to its script.

Python imports only the first ``sitecustomize`` it finds, so this one loads any other
``sitecustomize`` further along ``sys.path`` by file, keeping the image's own start-up code
working. It never imports torch; see stepscope_agent.bootstrap.
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        directory = os.path.abspath(entry or os.getcwd())
        if directory == here:
            continue
        for candidate in (
            os.path.join(directory, "sitecustomize.py"),
            os.path.join(directory, "sitecustomize", "__init__.py"),
        ):
            if os.path.isfile(candidate):
                import importlib.util

                spec = importlib.util.spec_from_file_location(
                    "_stepscope_chained_sitecustomize", candidate
                )
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                return


def _install_stepscope() -> None:
    try:
        from stepscope_agent import bootstrap
    except ImportError as error:
        if os.environ.get("STEPSCOPE_AGENT_DIR"):
            print(f"stepscope: hook not loaded ({error})", file=sys.stderr)
        return
    bootstrap.install()


try:
    _chain_next_sitecustomize()
finally:
    _install_stepscope()
