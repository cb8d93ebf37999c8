"""Run a Coze code-node file the way coze-studio's direct runner calls it, and print its JSON result.

    run_coze_code.py CODE_FILE PARAMS_JSON
The runner defines `Args` (with `.params`) and `Output(dict)`, appends the user's code, and runs
`asyncio.run(main(Args(params)))`, printing the result as JSON (coze-studio backend/infra/coderunner).
Its import restrictions are not reproduced here; see the note at the top of the code file.
"""

import sys
from pathlib import Path

PRELUDE = """import asyncio
import json
import sys


class Args:
    def __init__(self, params):
        self.params = params


class Output(dict):
    pass

"""
EPILOGUE = """

result = asyncio.run(main(Args(json.loads(sys.argv[1]))))
print(json.dumps(result, ensure_ascii=False))
"""

if __name__ == "__main__":
    code = PRELUDE + Path(sys.argv[1]).read_text(encoding="utf-8") + EPILOGUE
    sys.argv = [sys.argv[0], sys.argv[2]]
    exec(compile(code, sys.argv[0], "exec"), {"__name__": "__coze__"})
