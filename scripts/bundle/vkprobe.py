# What the bundle's Vulkan loader (lib/libvulkan.so.1, found through LD_LIBRARY_PATH) and the
# host's driver show, independently of the addon: instance creation, then each device's name and
# API version. Run by `bin/vugpu --bundle-info` when the host has python3; never fails the caller.
import ctypes as C

try:
    vk = C.CDLL('libvulkan.so.1')
except OSError as e:
    print(f'vulkan loader: not loadable ({e})')
    raise SystemExit(0)

class AppInfo(C.Structure):
    _fields_ = [('sType', C.c_int), ('pNext', C.c_void_p), ('app', C.c_char_p), ('appVersion', C.c_uint32),
                ('engine', C.c_char_p), ('engineVersion', C.c_uint32), ('apiVersion', C.c_uint32)]

class InstanceInfo(C.Structure):
    _fields_ = [('sType', C.c_int), ('pNext', C.c_void_p), ('flags', C.c_uint32), ('app', C.POINTER(AppInfo)),
                ('layers', C.c_uint32), ('layerNames', C.c_void_p), ('exts', C.c_uint32), ('extNames', C.c_void_p)]

vk.vkCreateInstance.argtypes = [C.POINTER(InstanceInfo), C.c_void_p, C.POINTER(C.c_void_p)]
vk.vkEnumeratePhysicalDevices.argtypes = [C.c_void_p, C.POINTER(C.c_uint32), C.c_void_p]
vk.vkGetPhysicalDeviceProperties.argtypes = [C.c_void_p, C.c_void_p]
vk.vkDestroyInstance.argtypes = [C.c_void_p, C.c_void_p]
vk.vkDestroyInstance.restype = None

app = AppInfo(0, None, b'vugpu-bundle', 1, b'vugpu', 1, (1 << 22) | (1 << 12))  # VK_STRUCTURE_TYPE_APPLICATION_INFO, 1.1
info = InstanceInfo(1, None, 0, C.pointer(app), 0, None, 0, None)        # VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
inst = C.c_void_p()
r = vk.vkCreateInstance(C.byref(info), None, C.byref(inst))
if r != 0:
    print(f'vulkan loader: vkCreateInstance returned {r} (no driver? VK_DRIVER_FILES / VK_LOADER_DEBUG=all)')
    raise SystemExit(0)
n = C.c_uint32()
vk.vkEnumeratePhysicalDevices(inst, C.byref(n), None)
devs = (C.c_void_p * n.value)()
vk.vkEnumeratePhysicalDevices(inst, C.byref(n), devs)
names = []
for d in devs[: n.value]:
    props = C.create_string_buffer(1024)  # VkPhysicalDeviceProperties: api u32, driver u32, vendor, device, type, name[256] at 20
    vk.vkGetPhysicalDeviceProperties(d, props)
    api = int.from_bytes(props.raw[0:4], 'little')
    name = props.raw[20:276].split(b'\0', 1)[0].decode(errors='replace')
    names.append(f'{name} (Vulkan {api >> 22 & 0x7f}.{api >> 12 & 0x3ff}.{api & 0xfff})')
vk.vkDestroyInstance(inst, None)
print(f'vulkan loader: {len(names)} device(s): ' + '; '.join(names))
