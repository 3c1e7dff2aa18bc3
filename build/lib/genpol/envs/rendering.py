"""Frames of MuJoCo scenes whose floor stays in view for the whole episode.

A floor in MuJoCo is a ``plane`` geom. It collides as an infinite plane, but it is *drawn* as a
rectangle of half-sizes ``geom_size[:2]`` around its position: 40 m for gymnasium's HalfCheetah,
20 m for Hopper and Humanoid, a 1.6 m wide strip from x = -2 to 198 m for dm_control's cheetah,
15 m for its quadruped. A tracking camera keeps the robot in the frame, so a robot that runs past the
rectangle runs on in a grey void (a trained HalfCheetah covers several hundred metres in 1000 steps).

Ways to fix this, and why this module takes the last one:

* Enlarge ``geom_size`` of the plane. MuJoCo builds each plane's vertex grid when the render context
  is made, with at most ``mjMAXPLANEGRID`` (200) cells per side (``render_context.c``, ``makePlane``):
  a plane kilometres wide gets cells tens of metres wide, which changes its per-vertex lighting; a
  checker repeated ``texrepeat`` times over the whole plane (``texuniform`` false, as in gymnasium's
  models) grows with it unless the material is edited too; and the edit touches a model the physics
  also reads (ray casts, e.g. rangefinders, accept only hits within a plane's drawn rectangle).
* ``size="0 0"``: MuJoCo's "infinite" plane is a grid of half-size about ``1.05 * zfar`` *around
  the plane's position* (``makePlane``), with ``zfar = vis.map.zfar * stat.extent`` (400 m for
  HalfCheetah), so a fast run still leaves it; it too needs a model edit.
* Move the drawn plane, not the model: after ``mjv_updateScene`` and before ``mjr_render``, the scene
  (``mjvScene``) holds one ``mjvGeom`` per drawn geom, which MuJoCo's API lets a caller edit. Each
  frame, the floor's ``mjvGeom`` is re-centred under the robot, shifted by a whole number of texture
  periods so that the checker stays fixed to the world and the motion stays visible. The simulation
  state is only read, and of the model only the offscreen buffer size may grow (a field that only
  rendering reads), so physics cannot change (``tests/test_rendering.py`` checks identical
  trajectories with and without rendering).

The camera is the model's own tracking camera (``mode="trackcom"``: gymnasium's ``track``,
dm_control's camera 0), which follows the centre of mass of the body it is attached to; the floor
follows the same body.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class Floor:
    """A horizontal plane geom of the world body, as it is drawn."""

    geom_id: int
    center: np.ndarray  # [3] world position of the plane (geom_pos: the world body's frame is the world's)
    axes: np.ndarray  # [3, 2] world directions of the plane's own x and y axes
    period: np.ndarray  # [2] metres after which the drawn texture repeats along those axes


def find_floors(model: mujoco.MjModel) -> list[Floor]:
    """Plane geoms of the world body whose normal points up (walls and tilted planes stay put)."""
    floors = []
    for geom_id in np.flatnonzero((model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE) & (model.geom_bodyid == 0)):
        rotation = np.empty(9)
        mujoco.mju_quat2Mat(rotation, model.geom_quat[geom_id])
        rotation = rotation.reshape(3, 3)
        if rotation[2, 2] < 0.99:  # the plane's normal is its z axis
            continue
        period = _texture_period(model, int(geom_id))
        if period is not None:
            floors.append(Floor(int(geom_id), model.geom_pos[geom_id].copy(), rotation[:, :2].copy(), period))
    return floors


def _texture_period(model: mujoco.MjModel, geom_id: int) -> np.ndarray | None:
    """Texture period [2] of a plane in metres, from MuJoCo's texture mapping of planes.

    A 2-D texture on a plane is mapped with texture coordinate ``u in [0, 1]`` across the plane's
    width ``2 s`` scaled by ``texrepeat r``, times ``s`` when ``texuniform``; an infinite axis
    (``s = 0``) uses ``u = x / 2`` scaled by ``r`` (``render_gl3.c``, ``settexture``). So the period
    is ``2 s / r``, or ``2 / r`` when uniform or infinite. Untextured planes can move by any amount:
    whole grid cells (``2 * geom_size[2]``) keep their vertex lighting still. None for a texture kind
    whose mapping this does not model (cube textures on planes), which is then left where it is.
    """
    half_size = model.geom_size[geom_id, :2]
    material = model.geom_matid[geom_id]
    texture = model.mat_texid[material, mujoco.mjtTextureRole.mjTEXROLE_RGB] if material >= 0 else -1
    if texture < 0:
        cell = 2 * model.geom_size[geom_id, 2]
        return np.full(2, cell if cell > 0 else 1.0)
    if model.tex_type[texture] != mujoco.mjtTexture.mjTEXTURE_2D:
        return None
    repeat = np.where(model.mat_texrepeat[material] > 0, model.mat_texrepeat[material], 1.0)
    uniform = bool(model.mat_texuniform[material])
    return np.where((half_size > 0) & ~uniform, 2 * half_size / repeat, 2 / repeat)


def floor_shift(floor: Floor, anchor: np.ndarray) -> np.ndarray:
    """World translation [3] that re-centres ``floor`` under ``anchor [3]`` by whole texture periods."""
    local = floor.axes.T @ (anchor - floor.center)  # [2] anchor in the plane's axes
    return floor.axes @ (np.round(local / floor.period) * floor.period)


class FloorFollowingRenderer:
    """``mujoco.Renderer`` whose floor planes follow the robot; shadows and reflections off.

    Shadows and reflections off render about 3x faster with Mesa's software EGL (50 vs 15 fps at
    480x480 on these machines).

    Args:
        model: the simulated model; only read (the offscreen buffer is enlarged if ``width`` or
            ``height`` exceeds it, a field that only rendering reads).
        width, height: frame size in pixels.
        camera: a model camera (id or name), or -1 for MuJoCo's default free camera.
        follow_floor: False draws the floor where the model puts it (for comparisons).
    """

    def __init__(self, model: mujoco.MjModel, width: int, height: int, camera: int | str = -1,
                 follow_floor: bool = True):
        if isinstance(camera, str):
            name = camera
            camera = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if camera < 0:
                raise ValueError(f"the model has no camera named '{name}'")
        if not -1 <= camera < model.ncam:
            raise ValueError(f"camera id {camera} is out of range [-1, {model.ncam})")
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        self.camera = camera
        # A tracking camera follows the body it is attached to; the floor follows the same body (the
        # world body's subtree centre of mass is that of the whole model).
        self.anchor_body = int(model.cam_bodyid[camera]) if camera >= 0 else 0
        self.floors = {floor.geom_id: floor for floor in find_floors(model)} if follow_floor else {}
        self._renderer = mujoco.Renderer(model, height=height, width=width)
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False

    def render(self, data: mujoco.MjData) -> np.ndarray:
        """The frame ``[height, width, 3]`` (uint8) of ``data``'s current kinematics."""
        self._update_scene(data)
        return self._renderer.render()

    def segment(self, data: mujoco.MjData) -> np.ndarray:
        """``[height, width, 2]`` (object id, object type) seen at each pixel, -1 where nothing is:
        the same view as ``render``, for telling floor pixels from others exactly."""
        self._update_scene(data)
        self._renderer.enable_segmentation_rendering()
        try:
            return self._renderer.render()
        finally:
            self._renderer.disable_segmentation_rendering()

    def _update_scene(self, data: mujoco.MjData) -> None:
        self._renderer.update_scene(data, camera=self.camera)
        if not self.floors:
            return
        anchor = data.subtree_com[self.anchor_body]
        scene = self._renderer.scene
        for geom in scene.geoms[:scene.ngeom]:
            floor = self.floors.get(geom.objid) if geom.objtype == mujoco.mjtObj.mjOBJ_GEOM else None
            if floor is not None:
                geom.pos[:] = floor.center + floor_shift(floor, anchor)

    def close(self) -> None:
        self._renderer.close()
