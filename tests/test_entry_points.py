"""The entry points as a user meets them, one subprocess per bad input: for a bad command line,
config file, override, workdir or data cache, the output is one `error: ...` line naming the
file or field, with no traceback, the exit status is 2 (command line) or 1, and every workdir
and cache the command was pointed at is byte for byte as before.

The commands importing JAX take a few seconds each: they run two at a time."""

import concurrent.futures
import copy
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import ml_collections
import processes
import pytest

from roformer.data import pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD = 'shakespeare-train.array_record-00000-of-00001'


def _tree(root) -> dict:
  """{relative path: bytes} of every file under root (nothing when it does not exist)."""
  root = pathlib.Path(root)
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob('*'))
          if p.is_file()}


def _run(args, cwd=REPO, env=None):
  return processes.run(args, cwd=cwd, env={**os.environ, **(env or {})})


def _check(case, done, status, message, watched):
  """One case's result: exit status, exactly one error line (the last) holding `message`, no
  traceback, and every watched directory unchanged."""
  out = done.stdout + done.stderr
  lines = done.stderr.strip().splitlines()
  errors_printed = [l for l in lines if l.startswith('error: ')]
  assert done.returncode == status, (case, done.returncode, out[-3000:])
  assert 'Traceback' not in out, (case, out[-3000:])
  assert len(errors_printed) == 1 and lines[-1] == errors_printed[0], (case, out[-3000:])
  assert message in errors_printed[0], (case, message, errors_printed[0])
  assert out.count(message) == 1, (case, 'said twice', out[-3000:])  # Not also as a log line.
  for path, before in watched.items():
    assert _tree(path) == before, (case, path)


def _damage(path, text=b'{"model": {"d_mo'):
  pathlib.Path(path).write_bytes(text)


def test_each_class_of_bad_input_is_one_line_naming_it_and_nothing_changes(
    mlm_workdir, data_dir, tmp_path):
  workdir = str(tmp_path / 'kept')  # An existing workdir the commands must leave alone.
  os.makedirs(workdir)
  pathlib.Path(workdir, 'results.txt').write_text('earlier results')
  configs = tmp_path / 'configs'
  configs.mkdir()
  (configs / 'returns_none.py').write_text('def get_config():\n  config = 1\n')
  (configs / 'syntax.py').write_text('def get_config(:\n')
  # Copies of a trained run, each with one damaged file.
  runs = {}
  for name, damaged in (('config', 'config.json'), ('tokenizer', 'tokenizer.model'),
                        ('checkpoint', 'checkpoints/16/state/_METADATA')):
    runs[name] = str(tmp_path / f'run-{name}')
    shutil.copytree(mlm_workdir[0], runs[name])
    _damage(os.path.join(runs[name], damaged))
  runs['evaluated'] = str(tmp_path / 'run-evaluated')  # Its final step evaluated.
  shutil.copytree(mlm_workdir[0], runs['evaluated'])
  pathlib.Path(runs['evaluated'], 'eval_results.json').write_text(json.dumps(
      {'step': 16, 'position': 'rope', 'overrides': [], 'splits': {'validation': {}}}))
  # A data cache with a truncated shard.
  pipeline.load_sources(ml_collections.ConfigDict(dict(
      name='shakespeare', data_dir=data_dir, text_key='text', splits={})))
  cache = tmp_path / 'data'
  shutil.copytree(pathlib.Path(data_dir, 'shakespeare'), cache / 'shakespeare')
  with open(cache / 'shakespeare' / '1.1.0' / SHARD, 'r+b') as f:
    f.truncate(1000)
  train = ['train.py', '--config=configs/test.py', f'--workdir={workdir}']
  resume = ['train.py', '--config=configs/test.py:mlm', f'--workdir={runs["tokenizer"]}',
            f'--config.data.data_dir={data_dir}', '--config.train.steps=18']
  cases = {  # name: (command, exit status, in the error line)
      'missing config': (['train.py', '--config=configs/missing.py', f'--workdir={workdir}'], 1,
                         'configs/missing.py does not exist'),
      'config returns None': (['train.py', f'--config={configs}/returns_none.py',
                               f'--workdir={workdir}'], 1, "get_config returned NoneType"),
      'config does not parse': (['train.py', f'--config={configs}/syntax.py',
                                 f'--workdir={workdir}'], 1, 'syntax.py cannot be loaded'),
      'no such field': (train + ['--config.model.no_such_field=1'], 1,
                        "config.model has no field 'no_such_field'"),
      'diverged': (['train.py', '--config=configs/test.py', f'--workdir={tmp_path / "diverged"}',
                    f'--config.data.data_dir={data_dir}', '--config.train.learning_rate=1e30',
                    '--config.train.warmup_steps=0', '--config.train.steps=4'], 1,
                   'the loss or gradient norm is not finite; training stopped'),
      'model vocabulary by hand': (train + ['--config.model.vocab_size=50'], 1,
                                   "--config.model.vocab_size: a run's vocabulary is set from "
                                   'its tokenizer, never by hand. Fix: drop it'),
      'nan': (train + ['--config.model.position.rope.scaling.factor=nan'], 1,
              'config.model.position.rope.scaling.factor=nan must be a finite number'),
      'misspelt dataset': (train + ['--config.data.name=shakespear'], 1,
                           "nor a TFDS dataset. Did you mean 'shakespeare'? Fix: one of"),
      'damaged data cache': (train + [f'--config.data.data_dir={cache}'], 1,
                             f'{SHARD} cannot be read'),
      'damaged tokenizer': (resume, 1, 'tokenizer.model is not a readable SentencePiece model'),
      'seed template without seeds': (['train.py', '--config=configs/test.py',
                                       f'--workdir={workdir}/seed={{seed}}'], 2,
                                      'names each seed\'s run with {seed}, which --seeds fills '
                                      'in. Fix: add --seeds (e.g. --seeds=0), or give a plain'),
      'eval blank workdir': (['eval.py', '--workdir='], 2, 'argument --workdir: is empty'),
      'eval damaged config.json': (['eval.py', f'--workdir={runs["config"]}'], 1,
                                   'config.json cannot be read'),
      'eval damaged checkpoint': (['eval.py', f'--workdir={runs["checkpoint"]}',
                                   f'--config.data.data_dir={data_dir}'], 1,
                                  'checkpoints/16 cannot be read'),
      'eval step neither number nor best': (['eval.py', f'--workdir={runs["tokenizer"]}',
                                             '--step=last'], 2,
                                            "'last' is neither a step number nor 'best'"),
      'eval of an earlier step over a later one': (
          ['eval.py', f'--workdir={runs["evaluated"]}', '--step=8',
           f'--config.data.data_dir={data_dir}'], 1,
          'eval_results.json holds the evaluation of a later checkpoint (step 16; validation), '
          'which this evaluation would replace. Fix: --out=eval_results.NAME.json to keep both, '
          'or --replace.'),
      'eval best of a run without one': (['eval.py', f'--workdir={runs["tokenizer"]}',
                                          '--step=best'], 1,
                                         'has no best checkpoint (best/ is kept by a run whose'),
      'eval out not a results file': (['eval.py', f'--workdir={runs["tokenizer"]}',
                                       '--out=config.json'], 2,
                                      "'config.json' is not a results file name: give eval_*.json"),
      'eval variant as the plain results': (
          ['eval.py', f'--workdir={runs["tokenizer"]}',
           '--config.model.position.rope.scaling.kind=linear',
           '--config.model.position.rope.scaling.factor=2'], 1,
          'makes this evaluation a variant of the run, and --out=eval_results.json holds'),
      'eval unknown remap, before the variant rule': (
          ['eval.py', f'--workdir={runs["tokenizer"]}',
           '--config.model.position.rope.remap.method=rerop'], 1,
          "config.model.position.rope.remap.method='rerop' is unknown. Fix: one of"),
      'eval misspelt scaling, before the variant rule': (
          ['eval.py', f'--workdir={runs["tokenizer"]}',
           '--config.model.position.rope.scaling.kind=yarm'], 1,
          "config.model.position.rope.scaling.kind='yarm' is unknown. Fix: one of"),
      'init_from damaged checkpoint': (
          ['train.py', '--config=configs/test.py:classify', f'--workdir={tmp_path / "fresh"}',
           f'--config.data.data_dir={data_dir}', f'--config.init_from={runs["checkpoint"]}'], 1,
          'config.init_from reads the latest step; to start from another'),
      'generate blank workdir': (['scripts/generate.py', '--workdir= ', '--prompt=a'], 2,
                                 'argument --workdir: is empty'),
      'sweep blank workdir': (['scripts/sweep.py', '--sweep=configs/sweeps/positions.py',
                               '--workdir='], 2, 'argument --workdir: is empty'),
      'report blank directory': (['scripts/report.py', ' '], 2, 'argument sweep_dir: is empty'),
      'plot blank out': (['scripts/plot_curves.py', workdir, '--out='], 2,
                         'argument --out: is empty'),
      'convert blank workdir': (['scripts/convert_hf_roformer.py', f'--checkpoint={workdir}',
                                 '--workdir='], 2, 'argument --workdir: is empty'),
  }
  watched = {path: _tree(path) for path in [workdir, cache, *runs.values()]}
  blank_cwd = tmp_path / 'cwd'  # Where an empty --workdir would have written.
  blank_cwd.mkdir()
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = {case: pool.submit(_run, command) for case, (command, _, _) in cases.items()}
    results['blank workdir'] = pool.submit(
        _run, [os.path.join(REPO, 'train.py'), f'--config={REPO}/configs/test.py',
               '--workdir=  '], blank_cwd)
  for case, (_, status, message) in cases.items():
    _check(case, results[case].result(), status, message, watched)
  _check('blank workdir', results['blank workdir'].result(), 2, 'argument --workdir: is empty',
         {blank_cwd: {}})


def test_a_glob_the_shell_expanded_is_told_to_be_quoted(tmp_path, capsys):
  """`--config.data.files DIR/*.txt` unquoted reaches argparse as one argument per file: the
  files past the first are unrecognized, and the fix says to quote the glob. Any other
  unrecognized argument keeps the plain fix."""
  from roformer import cli  # pylint: disable=g-import-not-at-top
  for name in ('a.txt', 'b.txt'):
    (tmp_path / name).write_text('x')
  parser = cli.ArgumentParser(prog='train.py')
  parser.add_argument('--files')
  for argv, fix in (([f'--files={tmp_path}/a.txt', str(tmp_path / 'b.txt')], 'quote a glob'),
                    (['--nosuch'], 'train.py --help lists the arguments')):
    with pytest.raises(SystemExit) as exited:
      parser.parse_args(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count('\n') == 1, err
    assert err.startswith('error: unrecognized arguments: ') and f'Fix: {fix}' in err, err


def test_debug_shows_the_traceback_and_bugs_keep_theirs(monkeypatch, capsys):
  """cli.guard: a user's problem is one line and exit status 1, unless --debug; anything else
  (a bug) keeps its traceback."""
  from roformer import cli  # pylint: disable=g-import-not-at-top
  from roformer import errors  # pylint: disable=g-import-not-at-top

  def bad_config():
    raise errors.ConfigError('config.x=1 is wrong. Fix: 2.')

  def bug():
    raise KeyError('a bug')

  monkeypatch.setattr(sys, 'argv', ['train.py'])
  with pytest.raises(SystemExit) as exited:
    cli.guard(bad_config)()
  assert exited.value.code == 1
  assert capsys.readouterr().err == 'error: config.x=1 is wrong. Fix: 2.\n'
  with pytest.raises(KeyError):
    cli.guard(bug)()
  monkeypatch.setattr(sys, 'argv', ['train.py', '--debug'])
  with pytest.raises(errors.ConfigError):
    cli.guard(bad_config)()
  assert capsys.readouterr().err == ''


_LONG_PROGRAM = """
import sys, time
import jax, jax.numpy as jnp
from roformer import cli
sys.argv = ['generate.py']
loop = jax.jit(lambda n: jax.lax.while_loop(
    lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.0000001 + 1e-9), (0, jnp.float32(1)))[1])
loop(2).block_until_ready()  # Compiled: what follows is one program of about 7 s.
def work():
  print('started', flush=True)
  return loop(2_000_000_000).block_until_ready()
cli.guard(lambda: cli.interruptible(work))()
"""


def test_ctrl_c_during_one_long_program_ends_the_process_at_once():
  """cli.interruptible (scripts/generate.py's decoding): Ctrl-C while one XLA program runs
  (seconds of lax.while_loop, during which Python would hold the signal) ends the process
  within a second with guard's one line and status 130, not when the program ends."""
  process = processes.interruptible_popen([sys.executable, '-c', _LONG_PROGRAM], cwd=REPO,
                                          text=True, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
  try:
    assert process.stdout.readline() == 'started\n'
    time.sleep(0.5)  # Inside the program.
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    waited = time.monotonic() - sent
  finally:
    process.kill()
  assert process.returncode == 130, err
  assert err.count('\n') == 1 and err.startswith('error: generate.py interrupted (Ctrl-C).')
  assert waited < 3.0, waited  # The program alone runs for about 7 s more.


def test_ctrl_c_is_one_line_and_the_status_shells_give_sigint(monkeypatch, capsys):
  """Ctrl-C that reaches an entry point's main: one line naming the command and what to do,
  exit status 130 (128 + SIGINT), no traceback; --debug keeps the traceback."""
  from roformer import cli  # pylint: disable=g-import-not-at-top

  def interrupted():
    raise KeyboardInterrupt

  monkeypatch.setattr(sys, 'argv', ['eval.py'])
  with pytest.raises(SystemExit) as exited:
    cli.guard(interrupted)()
  assert exited.value.code == 128 + signal.SIGINT
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and err.startswith('error: eval.py interrupted (Ctrl-C).')
  assert 'rerun the same command' in err
  monkeypatch.setattr(sys, 'argv', ['eval.py', '--debug'])
  with pytest.raises(KeyboardInterrupt):
    cli.guard(interrupted)()


@pytest.mark.parametrize('code, failure, fix', [
    ('ENOSPC', 'no space left on device', 'free space on that disk'),
    ('EDQUOT', 'disk quota exceeded', 'within your quota'),
    ('EACCES', 'permission denied', 'make that directory writable'),
    ('EROFS', 'read-only file system', 'remount'),
])
def test_each_kind_of_failed_write_gets_its_own_fix(code, failure, fix):
  """A failed write is one line naming the failure and the path, with the fix for that kind of
  failure (a full disk is not fixed by permissions, nor a read-only disk by freeing space),
  also when the OSError is the cause of another exception, as orbax raises them."""
  import errno  # pylint: disable=g-import-not-at-top
  from roformer import cli  # pylint: disable=g-import-not-at-top
  from roformer import loop  # pylint: disable=g-import-not-at-top

  os_error = OSError(getattr(errno, code), 'the system text', '/runs/lm/metrics.jsonl')
  try:
    raise RuntimeError('a writer failed') from os_error
  except RuntimeError as wrapped:
    line = cli.message(wrapped)
  assert line.startswith(f'{failure}: /runs/lm/metrics.jsonl. Fix: '), line
  assert fix in line.split('Fix: ')[1], line
  assert line.endswith(', then rerun the same command.'), line
  stop = loop.storage_stop_message(f'{failure}: /runs/lm/x', '/nonexistent/checkpoints')
  assert fix in stop.split('Fix: ')[1] and 'no checkpoint was complete yet' in stop, stop
  others = {'free space on that disk', 'within your quota', 'make that directory writable',
            'remount'} - {fix}
  assert not any(o in line for o in others), line


def test_help_and_a_bad_flag_answer_before_jax_is_imported():
  """train.py and eval.py parse their command line (the config overrides too) before they
  import JAX and the model: `--help` and a flag the parser refuses (eval.py's --out
  included) answer at once."""
  code = textwrap.dedent("""\
      import runpy, sys
      for argv, status in ((['train.py', '--help', '--config.seed=3'], 0),
                           (['eval.py', '--workdir=', '--config.eval.batch_size=2'], 2),
                           (['eval.py', '--workdir=w', '--out=config.json'], 2)):
        sys.argv = argv
        try:
          runpy.run_path(argv[0], run_name='__main__')
        except SystemExit as e:
          assert e.code == status, (argv, e.code)
      assert 'jax' not in sys.modules, 'jax imported'
      """)
  done = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                        check=False, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  assert '--workdir' in done.stdout and 'argument --workdir: is empty' in done.stderr
  assert "argument --out: 'config.json' is not a results file name" in done.stderr


def test_help_lists_every_flag_an_entry_point_needs():
  """Every entry point reads its command line with argparse (cli.ArgumentParser): --help lists
  its arguments, --workdir (and generate.py's --input) included, and --debug."""
  commands = {'train.py': ('--workdir WORKDIR', '--seeds SEEDS', '--distributed'),
              'eval.py': ('--workdir WORKDIR', '--splits SPLITS'),
              'scripts/generate.py': ('--workdir WORKDIR', '--input INPUT', '--prompt PROMPT')}
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    done = dict(zip(commands, pool.map(lambda c: _run([c, '--help']), commands)))
  for command, wanted in commands.items():
    assert done[command].returncode == 0, done[command].stderr[-500:]
    for flag in wanted + ('--debug',):
      assert flag in done[command].stdout, (command, flag)


def test_a_malformed_kill_point_is_refused_at_start_up_before_anything_is_written(
    mlm_workdir, tmp_path):
  """ROFORMER_KILL_AT is parsed before an entry point's work: a malformed value, an infinite or
  NaN delay is one line, and neither a trained workdir nor a new one gains a file."""
  trained = str(tmp_path / 'trained')
  shutil.copytree(mlm_workdir[0], trained)
  fresh = tmp_path / 'fresh'
  cases = {
      'json.partial:x': ['eval.py', f'--workdir={trained}'],
      'json.partial:1:inf': ['train.py', '--config=configs/test.py', f'--workdir={fresh}'],
      'json.partial:1:nan': ['scripts/report.py', trained],
  }
  watched = {trained: _tree(trained), fresh: {}}
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    done = {value: pool.submit(_run, command, env={'ROFORMER_KILL_AT': value})
            for value, command in cases.items()}
  for value in cases:
    _check(value, done[value].result(), 1, f'ROFORMER_KILL_AT={value!r} is not', watched)
  assert not fresh.exists()


# A bad input for every script (those that test_each_class_of_bad_input... covers too), and
# the words its one error line holds. Modules of shared code, not entry points, are listed as
# None.
SCRIPT_CASES = {
    'attention_scaling.py': (['--lengths=abc'], 2, '--lengths=abc'),
    'attention_sinks.py': (['--out=/tmp/never'], 1, 'no --workdir given'),
    'benchmark.py': (['--config=configs/missing.py'], 1, 'configs/missing.py does not exist'),
    'benchmark_torch.py': (['--model=foo'], 2, "invalid choice: 'foo'"),
    'build_time.py': (['--layers=0,3'], 2, '--layers=0,3: give depths of 1 or more'),
    'compare_torch.py': (['--steps=x'], 2, "argument --steps: invalid int value: 'x'"),
    'convert_hf.py': (['--from_hf=/nonexistent', '--workdir=/tmp/never'], 1, 'no config.json'),
    'convert_hf_roformer.py': (['--checkpoint=/nonexistent', '--workdir=/tmp/never'], 1,
                               '/nonexistent'),
    'corpus_benchmark.py': (['--gigabytes=-1'], 2, "'-1' is not a positive number"),
    'data_throughput.py': (['--config=configs/missing.py'], 1, 'does not exist'),
    'docs_from_records.py': (['--nosuch'], 2, 'unrecognized arguments: --nosuch'),
    'extension_table.py': (['/nonexistent'], 1, 'holds no evaluation of'),
    'generate.py': (['--workdir=/nonexistent', '--prompt=a'], 1, '/nonexistent'),
    'group_rate.py': (['--config=configs/missing.py'], 1, 'does not exist'),
    'init_loss.py': (['--runs', '/nonexistent'], 1, '/nonexistent has no config.json'),
    'keep_records.py': (['/nonexistent', '/tmp/never'], 1, 'has no sweep.json'),
    'keep_run.py': (['/nonexistent', '/tmp/never/run'], 1, '/nonexistent holds no run'),
    'kernel_ir.py': (['--kinds=shaw'], 1, 'shaw does not run on the fused kernels'),
    'make_hf_fixtures.py': None,  # Needs torch: with it, it writes the fixtures; without, a line.
    'generated_docs.py': (['--nosuch'], 2, 'unrecognized arguments'),
    'plot_curves.py': (['/nonexistent', '--out=/tmp/never.png'], 1, '/nonexistent'),
    'point_time.py': (['--config=configs/synthetic.py:copy', '--vary=train.compile_ahead=on'],
                      1, 'with two values or more'),
    'report.py': (['/nonexistent'], 2, 'does not exist'),
    'reruns.py': None,  # The rerun blocks of scripts/docs_from_records.py.
    'moe_impl.py': (['--k=3', '--experts=2'], 2, '--k=3 is more than --experts=2'),
    'rope_precision.py': (['--length=-5'], 2, "'-5' is not a positive integer"),
    'run_tables.py': None,  # The reference runs' blocks of scripts/docs_from_records.py.
    'seed_tables.py': None,  # The seed tables' blocks of scripts/docs_from_records.py.
    'sweep.py': (['--sweep=configs/missing.py', '--workdir=/tmp/never'], 2, 'does not exist'),
    'sweep_plan.py': None,  # What scripts/sweep.py settles before anything runs.
    'sweep_points.py': None,  # The report's reading of a sweep's points.
    'sweep_times.py': None,  # A sweep's kept timings, read by keep_records and the docs.
    'timing.py': None,  # The shapes and rounds the benchmarks share.
}


def test_every_script_has_a_bad_input_case():
  listed = set(SCRIPT_CASES)
  found = {p.name for p in pathlib.Path(REPO, 'scripts').glob('*.py') if p.name != '__init__.py'}
  assert found == listed, (found - listed, listed - found)


@pytest.fixture(scope='module')
def script_runs():
  """Every script's bad-input run, two at a time (each imports its libraries in seconds)."""
  cases = {s: c for s, c in SCRIPT_CASES.items() if c}
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    futures = {s: pool.submit(_run, [f'scripts/{s}'] + c[0]) for s, c in cases.items()}
    return {s: f.result() for s, f in futures.items()}


@pytest.mark.parametrize('script', sorted(s for s, c in SCRIPT_CASES.items() if c))
def test_every_script_ends_a_bad_input_with_one_line_and_then_silence(script, script_runs):
  _, status, message = SCRIPT_CASES[script]
  done = script_runs[script]
  out = (done.stdout + done.stderr).rstrip('\n').splitlines()
  assert 'Traceback' not in done.stderr, done.stderr[-2000:]
  assert out and out[-1].startswith('error: ') and message in out[-1], out[-3:]
  assert sum(line.startswith('error: ') for line in out) == 1, out
  assert done.returncode == status, done.returncode


def test_a_config_file_or_argument_of_the_wrong_kind_is_named_with_what_is_taken(
    tmp_path, monkeypatch):
  """--config names a file that is not Python, a relative path given outside the repository,
  or an argument configs/lm.py does not take: each one line saying what would work."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  from roformer import errors  # pylint: disable=import-outside-toplevel
  with pytest.raises(errors.ConfigError, match=r'README.md is not a Python file. Fix: give a '
                     r'.py file that defines get_config'):
    config_args.load_file(os.path.join(REPO, 'README.md'))
  monkeypatch.chdir(tmp_path)
  with pytest.raises(errors.ConfigError, match=r'configs/lm.py does not exist \(a relative path '
                     rf'is read from the current directory, {tmp_path}: did you mean '
                     rf'{REPO}/configs/lm.py\?\)'):
    config_args.load_file('configs/lm.py')
  monkeypatch.chdir(REPO)
  for arg, hint in (('ropee', " (did you mean 'rope' for 'ropee'?)"), ('llama,alibi,zzz', ''),
                    ('gemma3,alibi', '')):
    with pytest.raises(errors.ConfigError) as info:
      config_args.load_file(f'configs/lm.py:{arg}')
    assert str(info.value).startswith(
        f'--config=configs/lm.py:{arg}: configs/lm.py:{arg} is not an argument of this '
        f'file{hint}. Fix: KIND (a position kind: alibi, ')
  assert config_args.load_file('configs/lm.py:llama,alibi').model.position.kind == 'alibi'


def test_the_shared_parser_takes_no_prefixes_and_trims_lists(capsys):
  """cli.ArgumentParser refuses a prefix of a longer flag (`--seed` is not `--seeds`), naming
  the flag meant, and a comma list drops the spaces around its items."""
  from roformer import cli  # pylint: disable=import-outside-toplevel
  parser = cli.ArgumentParser(prog='train.py')
  parser.add_argument('--seeds', type=cli.comma_list, default=[])
  assert parser.parse_args(['--seeds=0, 1 ,2']).seeds == ['0', '1', '2']
  with pytest.raises(SystemExit) as exit_info:
    parser.parse_args(['--seed=3'])
  err = capsys.readouterr().err
  assert exit_info.value.code == 2 and err == (
      'error: unrecognized arguments: --seed=3. Fix: --seed: did you mean --seeds? (train.py '
      '--help lists the arguments.)\n')  # A misspelt flag gets the one meant.


def test_init_loss_reads_records_from_before_model_init_and_refuses_bad_counts(capsys):
  """scripts/init_loss.py: a kept record whose config predates model.init reads as the init it
  trained with (migrated: classic); a count of 0, a negative length or a field without its
  value is one error naming the flag, before any model is built."""
  from roformer import cli  # pylint: disable=import-outside-toplevel
  from scripts import init_loss  # pylint: disable=import-outside-toplevel
  old = 'docs/results/options_2026-11-27/records/flip_flop,alibi,seed=0'
  row = init_loss.first_steps([os.path.join(REPO, old)], [100]).splitlines()[-1]
  assert row.startswith('| flip_flop,alibi,seed=0 | classic | '), row
  with pytest.raises(SystemExit) as exit_info:
    init_loss.main(['--config=configs/test.py', '--seeds=0'])
  assert exit_info.value.code == 2 and "--seeds: '0' is not a positive integer" in (
      capsys.readouterr().err)
  for argv, says in ((['--seq_len=-4'], '--seq_len=-4: give a length'),
                     (['--fields', 'model.dtype', 'float32'], '--fields model.dtype: write '
                                                               'FIELD=VALUE')):
    with pytest.raises(cli.UsageError, match=re.escape(says)):
      init_loss.main(['--config=configs/test.py'] + argv)


def test_evaluate_extensions_names_a_bad_workdir_or_variant_in_one_line(tmp_path):
  """scripts/evaluate_extensions.sh: a directory that is no workdir, a path that is none, or
  an unknown name in VARIANTS (checked before the first evaluation) is one error line."""
  env = {**os.environ, 'PYTHON': sys.executable}
  for workdir, variants, status, says in (
      (tmp_path, '', 1, 'config.json does not exist'),
      (tmp_path / 'missing', '', 1, 'is not a directory. Fix:'),
      (tmp_path, 'plain favour', 2, 'VARIANTS names favour, which is unknown')):
    done = subprocess.run(['bash', 'scripts/evaluate_extensions.sh', str(workdir)], cwd=REPO,
                          env={**env, 'VARIANTS': variants} if variants else env,
                          capture_output=True, text=True, timeout=120, check=False)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == status and len(lines) == 1 and lines[0].startswith('error: '), (
        done.returncode, lines)
    assert says in lines[0], lines


def _faked_eval(tmp_path, seq_len: int, kind: str = 'rope'):
  """(config, workdir, calls, python) for scripts/evaluate_extensions.sh: a saved run of
  configs/test.py:`kind` at `seq_len`, and a python whose eval.py records its flags in `calls`."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  config = config_args.load_file(f'configs/test.py:{kind}')
  config.data.seq_len = seq_len
  workdir = tmp_path / 'w'
  workdir.mkdir()
  saved_config.save(config, str(workdir))
  calls = tmp_path / 'calls'
  fake = tmp_path / 'python'
  fake.write_text(f'#!/bin/sh\ncase "$1" in */eval.py) echo "$@" >> {calls}; exit 0;; esac\n'
                  f'exec {sys.executable} "$@"\n')
  fake.chmod(0o755)
  return config, workdir, calls, fake


@pytest.mark.parametrize('kind,variants,says', [
    ('alibi', '', "RoPE's scalings need RoPE in the position kind. Fix: VARIANTS=plain, or a "),
    ('rope+fox', 'rerope', 'the remaps need layers of plain rope (not combined with a bias, not '
                           'xpos). Fix: VARIANTS=plain and the scalings, or a RoPE run')])
def test_evaluate_extensions_names_the_variants_a_model_without_plain_rope_takes(
    kind, variants, says, tmp_path):
  """An ALiBi model (an imported BLOOM or MPT) takes the plain variant alone; a model whose
  RoPE is combined takes the scalings too, not the remaps. eval.py is faked."""
  _, workdir, calls, fake = _faked_eval(tmp_path, 16, kind)
  env = {**os.environ, 'PYTHON': str(fake), 'VARIANTS': variants}
  if not variants:
    env.pop('VARIANTS')
  done = subprocess.run(['bash', 'scripts/evaluate_extensions.sh', str(workdir)], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == 1 and says in done.stderr, done.stderr
  assert not calls.exists()
  taken = 'plain' if kind == 'alibi' else 'plain yarn'  # A combined RoPE takes the scalings.
  done = subprocess.run(['bash', 'scripts/evaluate_extensions.sh', str(workdir)], cwd=REPO,
                        env={**env, 'VARIANTS': taken}, capture_output=True, text=True,
                        timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  assert len(calls.read_text().splitlines()) == len(taken.split())


def test_evaluate_extensions_sizes_each_remap_by_the_shared_rule_and_eval_accepts_it(tmp_path):
  """Each remap variant gets remap.fitted's options for the trained length and the longest
  evaluated (the passkey-extension sweep's rule), for a short model too (16 tokens at 8x), and
  each passes the checks eval.py makes of it; `plain` gets no remap flag. eval.py is faked: it
  records the flags each variant gets."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  from roformer.positions import remap  # pylint: disable=import-outside-toplevel
  config, workdir, calls, fake = _faked_eval(tmp_path, 16)
  methods = ['rerope', 'leaky_rerope', 'self_extend', 'string', 'dca', 'sinks']
  done = subprocess.run(['bash', 'scripts/evaluate_extensions.sh', str(workdir)], cwd=REPO,
                        env={**os.environ, 'PYTHON': str(fake),
                             'VARIANTS': ' '.join(methods + ['plain'])},
                        capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  calls = [line.split() for line in calls.read_text().splitlines()]
  assert len(calls) == 7 and not any('remap' in flag for flag in calls[6])
  rope = '--config.model.position.rope.remap.'
  fitted = remap.fitted(16, 8 * 16)
  for flags, method in zip(calls, methods):
    overrides = [flag[len('--config.'):].split('=', 1) for flag in flags
                 if flag.startswith(rope)]
    assert dict(overrides) == {'model.position.rope.remap.method': method, **{
        f'model.position.rope.remap.{k}': str(v) for k, v in fitted[method].items()}}
    # What eval.py checks of them: each field, then the remap against the 16 trained positions.
    resolve.validate(config_args.apply(copy.deepcopy(config), overrides))


def test_evaluate_extensions_sets_an_imported_scalings_own_options_back_under_another(tmp_path):
  """A model with YaRN's index ramp and attention factor (an imported Qwen2 with YaRN, say):
  the other scalings get those options back at their defaults, which eval.py accepts (before,
  `linear` was refused for the ramp); its own kind keeps them. eval.py is faked."""
  from roformer import config_args  # pylint: disable=import-outside-toplevel
  from roformer import resolve  # pylint: disable=import-outside-toplevel
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  config, workdir, calls, fake = _faked_eval(tmp_path, 16)
  config.model.position.rope.scaling.update(kind='yarn', factor=4.0, original_length=16,
                                            ramp='index', attention_factor=1.1)
  saved_config.save(config, str(workdir))
  done = subprocess.run(['bash', 'scripts/evaluate_extensions.sh', str(workdir)], cwd=REPO,
                        env={**os.environ, 'PYTHON': str(fake), 'VARIANTS': 'linear yarn llama3'},
                        capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  field = '--config.model.position.rope.scaling.'
  lines = calls.read_text().splitlines()
  assert len(lines) == 3, lines
  for line, kind in zip(lines, ('linear', 'yarn', 'llama3')):
    flags = [f for f in line.split() if f.startswith(field)]
    reset = [] if kind == 'yarn' else [f'{field}ramp=ratio', f'{field}attention_factor=0.0']
    assert flags == [f'{field}kind={kind}', *reset], flags
    overrides = [f[len('--config.'):].split('=', 1) for f in flags]
    resolve.validate(config_args.apply(copy.deepcopy(config), overrides))


def test_evaluate_extensions_tags_its_files_and_passes_each_flag_to_the_variants_reading_it(
    tmp_path):
  """TAG=NAME names every file after it; --out (which sent every variant to one file) and a
  non-RoPE model are refused in one line; a remap option given after WORKDIR reaches only the
  method that reads it, a scaling field only the scalings. eval.py is faked: it records the
  flags."""
  from roformer import saved_config  # pylint: disable=import-outside-toplevel
  config, workdir, calls, fake = _faked_eval(tmp_path, 64)
  run = lambda *args, **env: subprocess.run(
      ['bash', 'scripts/evaluate_extensions.sh', *map(str, args)], cwd=REPO,
      env={**os.environ, 'PYTHON': str(fake), **env}, capture_output=True, text=True,
      timeout=120, check=False)
  done = run(workdir, VARIANTS='self_extend leaky_rerope plain', TAG='eight')
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip().endswith(f'scripts/extension_table.py {workdir} --tag eight')
  outs = [line.split('--out ')[1].split()[0] for line in calls.read_text().splitlines()]
  assert outs == ['eval_results.eight.remap_self_extend.json',
                  'eval_results.eight.remap_leaky_rerope.json', 'eval_results.eight.json']
  done = run(workdir, '--out=eval_results.mine.json')
  assert done.returncode == 2 and "--out=eval_results.mine.json: the script names" in done.stderr
  calls.unlink()  # A remap option given after WORKDIR reaches only the method that reads it,
  # after the fitted one (16 groups at 8 x 64), so that it is the value eval.py applies.
  group, beta = ('--config.model.position.rope.remap.group_size=40',
                 '--config.model.position.rope.scaling.beta=16')
  assert run(workdir, group, beta, VARIANTS='plain self_extend yarn rerope').returncode == 0
  lines = [line.split() for line in calls.read_text().splitlines()]
  given = [{f for f in line if f in (group, beta)} for line in lines]
  assert given == [set(), {group}, {beta}, set()], given
  groups = [f for f in lines[1] if f.startswith('--config.model.position.rope.remap.group_size=')]
  assert groups == ['--config.model.position.rope.remap.group_size=16', group], groups
  calls.unlink()  # What the rule cannot size, or lengths that are none, before any evaluation.
  for env, said in (({'MULTIPLIERS': '0,2'}, 'MULTIPLIERS=0,2: not whole numbers of at least 1'),
                    ({'MULTIPLIERS': '1,x'}, 'MULTIPLIERS=1,x: not whole numbers')):
    done = run(workdir, **env)
    assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
    assert said in done.stderr and not calls.exists(), done.stderr
  config.data.seq_len = 4
  saved_config.save(config, str(workdir))
  done = run(workdir)
  assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
  assert 'a trained length of 4 is too short' in done.stderr and not calls.exists()
  config.data.seq_len = 64
  for kind, variants, said in (('alibi', 'plain yarn', "RoPE's scalings need RoPE"),
                               ('rope+fox', 'plain rerope', 'the remaps need layers of plain rope')):
    config.model.position.kind = kind
    saved_config.save(config, str(workdir))
    done = run(workdir, VARIANTS=variants)
    assert done.returncode == 1 and done.stderr.count('\n') == 1, done.stderr
    assert f"position.kind='{kind}': {said}" in done.stderr, done.stderr
  assert run(workdir, VARIANTS='plain yarn').returncode == 0  # rope+fox has RoPE's scalings.


def test_plot_curves_names_an_unwritable_kind_and_a_metric_no_record_holds(tmp_path):
  """scripts/plot_curves.py: --out of a kind matplotlib cannot write, or a --split/--metric that
  no record holds (which drew an empty plot), is one error naming the flag; a right one draws
  the curve and tables the records."""
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from scripts import plot_curves  # pylint: disable=import-outside-toplevel
  run = os.path.join(REPO, 'docs/results/options_2026-11-27/records/flip_flop,alibi,seed=0')
  with pytest.raises(errors.ConfigError, match=r'--out=.*curves\.md: matplotlib writes none'):
    plot_curves.main([run, f'--out={tmp_path / "curves.md"}'])
  with pytest.raises(errors.ConfigError, match=r"no 'val' record holds 'loss' .*validation:"):
    plot_curves.main([run, f'--out={tmp_path / "c.png"}', '--split=val'])
  assert not (tmp_path / 'c.png').exists()
  plot_curves.main([run, f'--out={tmp_path / "c.png"}'])
  assert (tmp_path / 'c.png').stat().st_size > 1000


def test_corpus_benchmark_names_a_failed_conversion_and_removes_its_corpus(tmp_path,
                                                                          monkeypatch):
  """A conversion that fails (a full disk, a missing package) is one error with its own last
  line, and the generated corpus is not left behind unless --keep."""
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from scripts import corpus_benchmark  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(corpus_benchmark, '_CONVERT', "raise SystemExit('no space left')")
  with pytest.raises(errors.ConfigError, match='the conversion failed: no space left Fix:'):
    corpus_benchmark.main(['--gigabytes=0.0005', '--files=1', f'--dir={tmp_path}'])
  assert not os.listdir(tmp_path)
  with pytest.raises(errors.ConfigError):
    corpus_benchmark.main(['--gigabytes=0.0005', '--files=1', f'--dir={tmp_path}', '--keep'])
  assert os.listdir(tmp_path / 'corpus')


def test_attention_scaling_checks_every_row_before_the_first_compiles(monkeypatch):
  """scripts/attention_scaling.py: a misspelled kind in --kinds is refused before any row is
  measured (it was found only after the rows before it had compiled and run)."""
  from roformer import errors  # pylint: disable=import-outside-toplevel
  from scripts import attention_scaling  # pylint: disable=import-outside-toplevel
  measured = []
  monkeypatch.setattr(attention_scaling, 'measure', lambda *a: measured.append(a))
  with pytest.raises(errors.ConfigError, match="attention.kind='favour' is unknown"):
    attention_scaling.main(['--kinds=softmax,favour', '--lengths=64,128'])
  assert not measured


def test_train_refuses_eval_splits_a_classifier_would_not_evaluate(tmp_path, monkeypatch):
  """A classifier evaluates config.eval.splits whatever --eval_splits names (eval.py refuses
  --splits the same way): --eval_splits=test scored validation too without a word."""
  import importlib  # pylint: disable=import-outside-toplevel
  from roformer import cli  # pylint: disable=import-outside-toplevel
  monkeypatch.syspath_prepend(REPO)
  monkeypatch.setattr(sys, 'argv', ['train.py'])
  train = importlib.import_module('train')
  args = train.parser().parse_args(['--config=configs/test.py:classify',
                                    f'--workdir={tmp_path / "rt"}', '--eval_splits=test'])
  with pytest.raises(cli.UsageError, match=r'--eval_splits=test: a classifier evaluates '
                     r'config.eval.splits \(validation,test\).*Fix: add '
                     r'--config.eval.splits="\(\'test\',\)"'):
    train.main(args)
  assert not (tmp_path / 'rt').exists()


def test_evaluate_extensions_offers_every_registered_scaling_and_remap():
  """scripts/evaluate_extensions.sh's menu of variants is the registries' scalings and remap
  methods: a new one is sized there, or this fails (but the scalings searched per model,
  LongRoPE's, which no factor sets)."""
  import re  # pylint: disable=import-outside-toplevel
  from roformer.positions import remap, scaling  # pylint: disable=import-outside-toplevel
  text = pathlib.Path(REPO, 'scripts', 'evaluate_extensions.sh').read_text(encoding='utf-8')
  menu = {name: set(re.search(rf'^{name}="([^"]*)"', text, re.M).group(1).split())
          for name in ('scalings', 'remaps')}
  assert menu['scalings'] == set(scaling.KINDS) - {'none'} - set(scaling.PER_MODEL)
  assert menu['remaps'] == set(remap.OPTIONS) - {'none'}
