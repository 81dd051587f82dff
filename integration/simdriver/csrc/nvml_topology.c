/* Simulated NVML topology: NVLinks, PCIe common ancestors and NUMA, from the GPU table.
 * Included by nvml.c (one translation unit: it uses nvml.c's handle tables and check()). */

#define NVML_FEATURE_ENABLED 1
#define NVML_NVLINK_DEVICE_TYPE_GPU 0
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 2
#define NVML_TOPOLOGY_INTERNAL 0
#define NVML_TOPOLOGY_SINGLE 10
#define NVML_TOPOLOGY_MULTIPLE 20
#define NVML_TOPOLOGY_HOSTBRIDGE 30
#define NVML_TOPOLOGY_NODE 40
#define NVML_TOPOLOGY_SYSTEM 50
#define NVSWITCH_PCI_DEVICE_ID 0x22A310DEu /* H100-generation NVSwitch */

/* The link `link` of a whole GPU, or an error (no NVLink at all: NOT_SUPPORTED). */
static nvmlReturn_t link_of(nvmlDevice_t d, unsigned link, const sim_nvlink_t **out)
{
    const sim_gpu_t *g = gpu_of(d);

    if (mig_of(d) || g->link_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned)g->link_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = &sim_nvlinks[g->link_first + link];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *active)
{
    const sim_nvlink_t *l;
    nvmlReturn_t r;

    CHECK(d, active);
    r = link_of(d, link, &l);
    if (r == NVML_SUCCESS)
        *active = NVML_FEATURE_ENABLED;
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    const sim_nvlink_t *l;
    nvmlReturn_t r;

    CHECK(d, pci);
    r = link_of(d, link, &l);
    if (r != NVML_SUCCESS)
        return r;
    if (l->gpu >= 0)
        return nvmlDeviceGetPciInfo_v3(&h_gpu[l->gpu], pci);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", l->domain, l->bus, l->device);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", l->domain, l->bus, l->device);
    pci->domain = l->domain;
    pci->bus = l->bus;
    pci->device = l->device;
    pci->pciDeviceId = NVSWITCH_PCI_DEVICE_ID;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type)
{
    const sim_nvlink_t *l;
    nvmlReturn_t r;

    CHECK(d, type);
    r = link_of(d, link, &l);
    if (r == NVML_SUCCESS)
        *type = l->gpu >= 0 ? NVML_NVLINK_DEVICE_TYPE_GPU : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return r;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t d1, nvmlDevice_t d2, int *level)
{
    const sim_gpu_t *a, *b;
    nvmlReturn_t r = check(d2);

    CHECK(d1, level);
    if (r != NVML_SUCCESS)
        return r;
    if (mig_of(d1) || mig_of(d2))
        return NVML_ERROR_NOT_SUPPORTED;
    a = gpu_of(d1);
    b = gpu_of(d2);
    if (a == b)
        *level = NVML_TOPOLOGY_INTERNAL;
    else if (a->pci_switch >= 0 && a->pci_switch == b->pci_switch)
        *level = NVML_TOPOLOGY_SINGLE;
    else if (a->host_bridge == b->host_bridge)
        *level = (a->pci_switch >= 0 && b->pci_switch >= 0) ? NVML_TOPOLOGY_MULTIPLE
                                                             : NVML_TOPOLOGY_HOSTBRIDGE;
    else if (a->numa_node >= 0 && a->numa_node == b->numa_node)
        *level = NVML_TOPOLOGY_NODE;
    else
        *level = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node)
{
    CHECK(d, node);
    if (gpu_of(d)->numa_node < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)gpu_of(d)->numa_node;
    return NVML_SUCCESS;
}

/* MIG profile facts a device plugin names resources from (nvidia.com/mig-<g>g.<gb>gb) and
   GFD labels (SMs, engines, slices): the spec's, per profile (spec.A100_80GB_PROFILES). */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *attr)
{
    const sim_mig_t *m;

    CHECK(d, attr);
    memset(attr, 0, sizeof(*attr));
    m = mig_of(d);
    if (m == NULL) {
        attr->gpuInstanceSliceCount = attr->computeInstanceSliceCount = gpu_of(d)->mig_capable ? 7 : 1;
        attr->multiprocessorCount = 14 * attr->gpuInstanceSliceCount;
        attr->memorySizeMB = gpu_of(d)->memory_mib;
        return NVML_SUCCESS;
    }
    attr->gpuInstanceSliceCount = m->attr.slices;
    attr->computeInstanceSliceCount = m->attr.slices;
    attr->multiprocessorCount = m->attr.sms;
    attr->sharedCopyEngineCount = m->attr.copy;
    attr->sharedDecoderCount = m->attr.decoder;
    attr->sharedEncoderCount = m->attr.encoder;
    attr->sharedJpegCount = m->attr.jpeg;
    attr->sharedOfaCount = m->attr.ofa;
    attr->memorySizeMB = m->memory_mib;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t d, nvmlDeviceAttributes_t *attr)
{
    return nvmlDeviceGetAttributes_v2(d, attr);
}
