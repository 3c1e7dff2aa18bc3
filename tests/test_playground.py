"""MuJoCo Playground backend: zero-copy DLPack, device matching, no retracing, clear errors."""

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs import EnvError

from conftest import needs

pytestmark = needs("mujoco_playground", "the playground extra is not installed")  # `make test` installs it


@pytest.fixture(scope="module")
def backend():
    env = envs.make_backend("playground:CartpoleBalance", num_envs=4, seed=0)
    env.reset()
    yield env
    env.close()


def test_jax_device_matches_torch_device(backend):
    assert backend.jax_device.platform == "cpu" and backend.device == torch.device("cpu")
    assert backend.impl == "jax"  # chosen for the CPU: Playground's default warp is ~10x slower there


def test_outputs_reach_torch_without_a_copy(backend):
    obs, reward, terminated, truncated, info = backend.step(torch.zeros(4, 1))
    jax_out = backend.last_outputs
    assert obs.data_ptr() == jax_out["obs"].unsafe_buffer_pointer()
    assert reward.data_ptr() == jax_out["reward"].unsafe_buffer_pointer()
    assert terminated.data_ptr() == jax_out["terminated"].unsafe_buffer_pointer()
    assert info["final_obs"].data_ptr() == jax_out["final_obs"].unsafe_buffer_pointer()


def test_actions_reach_jax_without_a_copy():
    import jax

    actions = torch.rand(4, 1)
    assert jax.dlpack.from_dlpack(actions).unsafe_buffer_pointer() == actions.data_ptr()


def test_step_is_traced_once(backend):
    for _ in range(5):
        backend.step(torch.rand(4, 1) * 2 - 1)
    assert backend.traces == 1


def test_reset_gives_the_carry_types_step_gives():
    """CheetahRun's reset left data.time weakly typed where step's output is not, so step compiled a second time
    on its second call (40 s on a CPU, every run, warm cache or not). Checked by tracing alone (jax.eval_shape),
    which compiles nothing: the types of reset's carry against those of step's."""
    import jax
    import jax.numpy as jnp

    backend = envs.make_backend("playground:CheetahRun", num_envs=2, seed=0)
    compiled = backend._compiled
    carry = jax.eval_shape(compiled.reset, jax.random.PRNGKey(0))
    after, _ = jax.eval_shape(compiled.step, carry, jax.ShapeDtypeStruct((2, backend.act_dim), jnp.float32))
    types = [[(leaf.shape, leaf.dtype, leaf.weak_type) for leaf in jax.tree.leaves(tree)] for tree in (carry, after)]
    assert jax.tree.structure(carry) == jax.tree.structure(after) and types[0] == types[1]
    backend.close()


def test_seeds_map_to_prng_keys(backend):
    first = backend.reset(seed=7).clone()
    again = backend.reset(seed=7).clone()
    other = backend.reset(seed=8).clone()
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])  # each env has its own key
    # reset() without a seed goes on from the last key, as gymnasium's and the other backends' do: it reset with
    # PRNGKey(0) every time, the same episodes again
    unseeded = backend.reset().clone()
    assert not torch.equal(unseeded, backend.reset()) and not torch.equal(unseeded, first)


def test_render_env0(backend):
    """Also: at the step that ends env 0's episode, ``info["final_frame"]`` draws its last state (the pose before
    the auto-reset), where ``render()`` after the step draws the next episode's first."""
    frame = envs.make_backend("playground:CartpoleBalance", num_envs=4, seed=0, render=True, max_episode_steps=3)
    frame.reset()
    image = frame.render()
    assert image.shape == (256, 256, 3) and image.std() > 5
    actions = torch.ones(4, 1)
    for _ in range(2):
        assert "final_frame" not in frame.step(actions)[4]
    before_reset = frame.render()  # after step 2 of 3
    info = frame.step(actions)[4]
    assert info["final_frame"].shape == (256, 256, 3) and info["final_frame"].dtype == np.uint8
    assert not np.array_equal(info["final_frame"], frame.render()) and not np.array_equal(info["final_frame"],
                                                                                       before_reset)
    frame.close()


def test_unknown_env_and_missing_assets_are_named():
    with pytest.raises(EnvError, match=r"unknown Playground env 'playground:CartpoleBalanse'.*CartpoleBalance"):
        envs.make("playground:CartpoleBalanse")
    from mujoco_playground._src import mjx_env

    if not mjx_env.MENAGERIE_PATH.exists():
        with pytest.raises(EnvError, match=r"needs the mujoco_menagerie robot assets.*mujoco_menagerie"):
            envs.make("playground:Go1JoystickFlatTerrain")
