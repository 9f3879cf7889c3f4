/*
 * fake_nvml.c -- a test double for NVIDIA's NVML library (libnvidia-ml.so.1).
 *
 * It exports the NVML entry points that pynvml (nvidia-ml-py) and MLflow's GPU
 * monitor call, and answers them from a plain-text "scenario" file, so the real
 * pynvml ctypes path can be exercised on machines without a GPU. All types are
 * declared here by hand from the ABI that pynvml's ctypes structures describe.
 *
 * Build:
 *   gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libnvidia-ml.so.1 \
 *       -o libnvidia-ml.so.1 fake_nvml.c -lpthread -ldl
 *   (plus -Wl,--version-script=<file> with "{ global: *; local: f; ... };" to play a
 *   driver branch that does not export f: pynvml finds functions with dlsym)
 *
 * ---------------------------------------------------------------------------
 * Environment
 * ---------------------------------------------------------------------------
 *   FAKE_NVML_SCENARIO  path of the scenario file. Read with getenv() on every
 *                       call. Unset, empty, or naming a missing file: the driver
 *                       is "not loaded" -- nvmlInit* return
 *                       NVML_ERROR_DRIVER_NOT_LOADED (9), and so does every other
 *                       call made while initialised.
 *   FAKE_NVML_CALL_LOG  optional path; when set, every NVML call appends one line
 *                         "<unix_time_ms> <function name> <device index> <pid>\n"
 *                       (index -1 for calls not about one device or with an
 *                       invalid handle). The file is opened with O_APPEND for
 *                       each line, so it may be deleted or truncated at any time.
 *
 * On every NVML call the file is stat()ed; when (path, device, inode, size,
 * mtime in ns, ctime in ns) differ from the loaded copy it is read again and all
 * sequence positions start over. A malformed file is reported on stderr and
 * makes every call (nvmlInit* included) return NVML_ERROR_UNKNOWN (999).
 *
 * ---------------------------------------------------------------------------
 * Scenario format (line based; one statement a line)
 * ---------------------------------------------------------------------------
 *   Blank lines and lines whose first non-blank character is '#' are ignored.
 *   A line is a key followed by its value, separated by blanks.
 *
 *   Global keys (before the first "gpu" line):
 *     init_error <ERR|code>       nvmlInit* return this instead of success
 *     driver_version <text>       nvmlSystemGetDriverVersion   (default 550.54.15)
 *     nvml_version <text>         nvmlSystemGetNVMLVersion     (default
 *                                 "<cuda major>.<driver_version>")
 *     cuda_driver_version <int>   nvmlSystemGetCudaDriverVersion[_v2] (default 12040)
 *     without <function>...       the driver branch lacks these functions; only a
 *                                 build that leaves them out of its exports can play
 *                                 it (a linker version script, see build_library),
 *                                 and a build that exports one is a bad scenario
 *
 *   "gpu" on a line of its own starts the next device (indices 0, 1, ... in
 *   order of appearance; at most 64). Keys after it describe that device:
 *     name <text>                 rest of the line (default "NVIDIA H100 80GB HBM3")
 *     uuid <text>                 (default GPU-fa4e<iiii>-0000-4000-8000-<iiiiiiiiiiii>,
 *                                  i = index in hex)
 *     lost 0|1                    1: every call on this device returns
 *                                 NVML_ERROR_GPU_IS_LOST (15), handle lookup included
 *     memory_v2 0|1               0: nvmlDeviceGetMemoryInfo_v2 returns
 *                                 NVML_ERROR_FUNCTION_NOT_FOUND (13), as with an
 *                                 old driver (default 1)
 *     process <pid> <bytes>       one running compute process (repeatable)
 *     graphics_process <pid> <bytes>   one running graphics process (repeatable)
 *     mig 0|1                     nvmlDeviceGetMigMode (current = pending); absent:
 *                                 NOT_SUPPORTED (no MIG). 1: as NVML documents for a
 *                                 MIG-enabled GPU, utilization is NOT_SUPPORTED and
 *                                 the process queries (the parent's aggregate, which
 *                                 needs privileges) answer NO_PERMISSION
 *     mig_device <gi> <ci> <profile> <total bytes> <used bytes> [<pid> <bytes>]
 *                                 one MIG device (slice) of a MIG-enabled GPU (repeatable,
 *                                 7 at most): its GPU and compute instance ids, its profile
 *                                 (1g.10gb), memory, and the process on it, if any.
 *                                 nvmlDeviceGetMigDeviceHandleByIndex gives its handle, on
 *                                 which name ("<GPU name> MIG <profile>"), UUID, memory info,
 *                                 instance ids and the compute processes answer
 *     processes_error <ERR>       the compute-process query fails with ERR
 *     graphics_processes_error <ERR>
 *   and numeric fields, each a sequence of one or more tokens:
 *     util mem_util               nvmlDeviceGetUtilizationRates (gpu %, memory %)
 *     mem_total mem_used          nvmlDeviceGetMemoryInfo[_v2] bytes; v1 reports
 *     mem_reserved                free = total - used; v2 reports reserved,
 *                                 used - reserved as used, and the same free
 *                                 (mem_reserved defaults to 0)
 *     temp                        nvmlDeviceGetTemperature[V], degrees C (GPU sensor)
 *     power                       nvmlDeviceGetPowerUsage, mW
 *     power_limit                 nvmlDeviceGetEnforcedPowerLimit, mW
 *     power_mgmt_limit            nvmlDeviceGetPowerManagementLimit, mW
 *                                 (defaults to the power_limit field)
 *     energy                      nvmlDeviceGetTotalEnergyConsumption, mJ
 *     fan                         nvmlDeviceGetFanSpeed, %
 *     virtualization              nvmlDeviceGetVirtualizationMode: 0 none (default),
 *                                 1 passthrough, 2 vGPU guest, 3 host vGPU, 4 host vSGA
 *     clock_graphics clock_sm clock_mem clock_video          nvmlDeviceGetClockInfo
 *     max_clock_graphics max_clock_sm max_clock_mem max_clock_video
 *                                                            nvmlDeviceGetMaxClockInfo
 *     clock_reasons               nvmlDeviceGetCurrentClocksEventReasons and its old
 *                                 name ...ThrottleReasons: a bitmask (0x20 SW thermal,
 *                                 0x40 HW thermal, 0x4 SW power cap, 0x80 power brake,
 *                                 0x8 HW slowdown, 0x1 idle)
 *     ecc_corrected_volatile ecc_uncorrected_volatile
 *     ecc_corrected_aggregate ecc_uncorrected_aggregate     nvmlDeviceGetTotalEccErrors
 *     retired_pages_sbe retired_pages_dbe retired_pages_pending
 *                                 nvmlDeviceGetRetiredPages[PendingStatus]: page counts by
 *                                 cause; supported when either count is given; read
 *                                 without moving on (pynvml asks twice per query)
 *     remapped_rows_corrected remapped_rows_uncorrected remapped_rows_pending
 *     remapped_rows_failure       nvmlDeviceGetRemappedRows; supported when either count
 *                                 is given; read without moving on
 *   xid <code> <unix ms>          an XID critical error happening at that time
 *                                 (repeatable): nvmlEventSetWait[_v2] delivers it, in time
 *                                 order, to an event set made before it and registered
 *                                 for XIDs on this GPU, once its time has come (a rewrite
 *                                 never delivers one twice). A MIG-enabled GPU or a vGPU
 *                                 guest (virtualization 2) answers NOT_SUPPORTED to
 *                                 nvmlDeviceGetSupportedEventTypes / RegisterEvents.
 *   A token is a decimal integer or an error name: an NVML_ERROR_* suffix such
 *   as NOT_SUPPORTED, GPU_IS_LOST, NO_PERMISSION, TIMEOUT, UNKNOWN (the
 *   NVML_ERROR_ prefix is accepted too). Each read of a field takes the next
 *   token and holds the last one once the sequence is exhausted; an error token
 *   makes the getter return that code. A field that is not given answers
 *   NVML_ERROR_NOT_SUPPORTED (3).
 *
 *   Example:
 *     driver_version 550.54.15
 *     cuda_driver_version 12040
 *     gpu
 *     name NVIDIA H100 80GB HBM3
 *     util 10 50 NOT_SUPPORTED 90
 *     mem_total 85899345920
 *     mem_used 1073741824
 *     process 4242 1073741824
 *     gpu
 *     lost 1
 *
 * Calls before a successful nvmlInit* (or after the matching nvmlShutdown)
 * return NVML_ERROR_UNINITIALIZED (1), like the real library. Handles are
 * pointers into a static table; a handle whose index is no longer in the
 * scenario answers NVML_ERROR_GPU_IS_LOST.
 *
 * Extra (non-NVML) exports for tests loading the library in-process:
 *   unsigned long long fake_nvml_call_count(const char *name);  NULL: all calls
 *   void fake_nvml_reset_call_counts(void);
 *   int fake_nvml_init_count(void);  nvmlInit calls not yet balanced by nvmlShutdown
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* NVML ABI, declared by hand                                                */
/* ------------------------------------------------------------------------ */

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

struct fake_device {
    unsigned int index;
};
typedef struct fake_device *nvmlDevice_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* v2 and v3 share this layout */

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

#define STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24U)))
#define NVML_MEMORY_V2 STRUCT_VERSION(nvmlMemory_v2_t, 2)
#define NVML_TEMPERATURE_V1 STRUCT_VERSION(nvmlTemperature_v1_t, 1)
_Static_assert(STRUCT_VERSION(nvmlMemory_v2_t, 2) == 0x02000028, "nvmlMemory_v2 layout");
_Static_assert(STRUCT_VERSION(nvmlTemperature_v1_t, 1) == 0x0100000C, "nvmlTemperature_v1");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_v3 layout");

#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_COUNT 4
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId / computeInstanceId without MIG */

/* ------------------------------------------------------------------------ */
/* Error names and strings                                                   */
/* ------------------------------------------------------------------------ */

static const struct {
    int code;
    const char *name;
    const char *text;
} ERRORS[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt Request Issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {22, "VGPU_ECC_NOT_SUPPORTED", "vGPU operation not available because ECC is enabled"},
    {23, "INSUFFICIENT_RESOURCES", "Insufficient resources"},
    {24, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {25, "ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {26, "DEPRECATED", "Deprecated"},
    {27, "NOT_READY", "Not ready"},
    {28, "GPU_NOT_FOUND", "GPU not found"},
    {29, "INVALID_STATE", "Invalid state"},
    {30, "RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"},
    {999, "UNKNOWN", "Unknown Error"},
};
#define N_ERRORS (sizeof(ERRORS) / sizeof(ERRORS[0]))

/* Error code for a name ("NOT_SUPPORTED" or "NVML_ERROR_NOT_SUPPORTED"); -1 if unknown. */
static int error_code_by_name(const char *name)
{
    if (strncmp(name, "NVML_ERROR_", 11) == 0)
        name += 11;
    for (size_t i = 1; i < N_ERRORS; i++) /* SUCCESS is not an error */
        if (strcmp(ERRORS[i].name, name) == 0)
            return ERRORS[i].code;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Functions, for call counting and the call log                             */
/* ------------------------------------------------------------------------ */

#define FUNCTIONS(X)                                                                      \
    X(nvmlInit) X(nvmlInit_v2) X(nvmlInitWithFlags) X(nvmlShutdown) X(nvmlErrorString)    \
    X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion)                             \
    X(nvmlSystemGetCudaDriverVersion) X(nvmlSystemGetCudaDriverVersion_v2)                \
    X(nvmlSystemGetProcessName)                                                           \
    X(nvmlDeviceGetCount) X(nvmlDeviceGetCount_v2)                                        \
    X(nvmlDeviceGetHandleByIndex) X(nvmlDeviceGetHandleByIndex_v2)                        \
    X(nvmlDeviceGetHandleByUUID) X(nvmlDeviceGetIndex) X(nvmlDeviceGetName)               \
    X(nvmlDeviceGetUUID) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2)         \
    X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetTemperature)                          \
    X(nvmlDeviceGetTemperatureV) X(nvmlDeviceGetPowerUsage)                               \
    X(nvmlDeviceGetEnforcedPowerLimit) X(nvmlDeviceGetPowerManagementLimit)               \
    X(nvmlDeviceGetComputeRunningProcesses_v2) X(nvmlDeviceGetComputeRunningProcesses_v3) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2)                                           \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)                                           \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v3)                                         \
    X(nvmlDeviceGetTotalEnergyConsumption) X(nvmlDeviceGetFanSpeed)                       \
    X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetMaxClockInfo)                                \
    X(nvmlDeviceGetMigMode) X(nvmlDeviceGetVirtualizationMode)                           \
    X(nvmlDeviceGetMaxMigDeviceCount) X(nvmlDeviceGetMigDeviceHandleByIndex)              \
    X(nvmlDeviceGetGpuInstanceId) X(nvmlDeviceGetComputeInstanceId)                       \
    X(nvmlDeviceGetCurrentClocksEventReasons) X(nvmlDeviceGetCurrentClocksThrottleReasons) \
    X(nvmlDeviceGetTotalEccErrors) X(nvmlDeviceGetRetiredPages)                           \
    X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetRemappedRows)                \
    X(nvmlDeviceGetSupportedEventTypes) X(nvmlDeviceRegisterEvents) X(nvmlEventSetCreate) \
    X(nvmlEventSetWait) X(nvmlEventSetWait_v2) X(nvmlEventSetFree)

#define AS_ENUM(f) FN_##f,
#define AS_NAME(f) #f,
enum { FUNCTIONS(AS_ENUM) FN_COUNT };
static const char *const FN_NAMES[FN_COUNT] = {FUNCTIONS(AS_NAME)};

/* ------------------------------------------------------------------------ */
/* Scenario model                                                            */
/* ------------------------------------------------------------------------ */

#define MAX_GPUS 64
#define TEXT_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE / NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define VERSION_LEN 80

enum {
    F_UTIL, F_MEM_UTIL, F_MEM_TOTAL, F_MEM_USED, F_MEM_RESERVED, F_TEMP, F_POWER,
    F_POWER_LIMIT, F_POWER_MGMT_LIMIT, F_ENERGY, F_FAN,
    F_CLOCK_GRAPHICS, F_CLOCK_SM, F_CLOCK_MEM, F_CLOCK_VIDEO,
    F_MAX_CLOCK_GRAPHICS, F_MAX_CLOCK_SM, F_MAX_CLOCK_MEM, F_MAX_CLOCK_VIDEO, F_VIRTUALIZATION,
    F_CLOCK_REASONS,
    F_ECC_CORRECTED_VOLATILE, F_ECC_UNCORRECTED_VOLATILE,
    F_ECC_CORRECTED_AGGREGATE, F_ECC_UNCORRECTED_AGGREGATE,
    F_RETIRED_SBE, F_RETIRED_DBE, F_RETIRED_PENDING,
    F_REMAPPED_CORRECTED, F_REMAPPED_UNCORRECTED, F_REMAPPED_PENDING, F_REMAPPED_FAILURE,
    F_COUNT
};
static const char *const FIELD_NAMES[F_COUNT] = {
    "util", "mem_util", "mem_total", "mem_used", "mem_reserved", "temp", "power",
    "power_limit", "power_mgmt_limit", "energy", "fan",
    "clock_graphics", "clock_sm", "clock_mem", "clock_video",
    "max_clock_graphics", "max_clock_sm", "max_clock_mem", "max_clock_video", "virtualization",
    "clock_reasons",
    "ecc_corrected_volatile", "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_corrected", "remapped_rows_uncorrected", "remapped_rows_pending",
    "remapped_rows_failure",
};

typedef struct {
    long long value;
    int error; /* 0: value is valid; otherwise an NVML error code */
} item_t;

typedef struct {
    item_t *items;
    int n;   /* 0: the field was not given */
    int pos; /* index of the item the next read returns */
} field_t;

typedef struct {
    unsigned int pid;
    unsigned long long used;
} proc_t;

enum { P_COMPUTE, P_GRAPHICS, P_KINDS };

typedef struct {
    long long t_ms; /* unix time in ms at which the event happens */
    unsigned int xid;
} xid_t;

#define MAX_MIG 7 /* an H100's most MIG devices */

typedef struct {
    unsigned int gi, ci;  /* GPU and compute instance ids */
    char profile[32];     /* "1g.10gb" */
    unsigned long long total, used;
    int has_proc;
    proc_t proc;          /* the process on it, if has_proc */
} mig_t;

typedef struct {
    char name[TEXT_LEN];
    char uuid[TEXT_LEN];
    int lost;
    int memory_v2;
    int mig; /* -1: no MIG support (NOT_SUPPORTED); 0: disabled; 1: enabled */
    field_t fields[F_COUNT];
    proc_t *procs[P_KINDS];
    unsigned int nprocs[P_KINDS];
    unsigned int capprocs[P_KINDS];
    int procs_error[P_KINDS];
    xid_t *xids;
    unsigned int nxids;
    unsigned int capxids;
    mig_t migs[MAX_MIG];
    unsigned int nmigs;
} gpu_t;

typedef struct {
    int init_error;
    char driver_version[VERSION_LEN];
    char nvml_version[VERSION_LEN + 16]; /* "" -> derived; copy_out enforces the limit */
    int cuda_driver_version;
    unsigned int ngpus;
    gpu_t gpus[MAX_GPUS];
} scenario_t;

enum { SC_ABSENT, SC_LOADED, SC_BROKEN };

typedef struct {
    char path[4096];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    struct timespec ctime;
} file_key_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state = SC_ABSENT;
static int g_have_key;
static file_key_t g_key;
static scenario_t g_sc;
static int g_init_count;
static unsigned long long g_calls[FN_COUNT];
static struct fake_device g_handles[MAX_GPUS];
static struct fake_device g_mig_handles[MAX_GPUS * MAX_MIG];

static void scenario_free(scenario_t *sc)
{
    for (unsigned int i = 0; i < MAX_GPUS; i++) {
        for (int f = 0; f < F_COUNT; f++)
            free(sc->gpus[i].fields[f].items);
        for (int k = 0; k < P_KINDS; k++)
            free(sc->gpus[i].procs[k]);
        free(sc->gpus[i].xids);
    }
    memset(sc, 0, sizeof *sc);
}

static void gpu_defaults(gpu_t *g, unsigned int index)
{
    snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
    snprintf(g->uuid, sizeof g->uuid, "GPU-fa4e%04x-0000-4000-8000-%012x", index, index);
    g->memory_v2 = 1;
    g->mig = -1;
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *path;
    int line;
    char message[256];
} parse_ctx_t;

static int parse_fail(parse_ctx_t *ctx, const char *what, const char *detail)
{
    snprintf(ctx->message, sizeof ctx->message, "%.120s:%d: %s%s%.60s", ctx->path, ctx->line, what,
             detail ? ": " : "", detail ? detail : "");
    return -1;
}

static char *next_token(char **cursor)
{
    char *s = *cursor;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0') {
        *cursor = s;
        return NULL;
    }
    char *tok = s;
    while (*s && *s != ' ' && *s != '\t')
        s++;
    if (*s)
        *s++ = '\0';
    *cursor = s;
    return tok;
}

static char *rest_of_line(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

static int parse_int(const char *tok, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (errno || end == tok || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_error_name(parse_ctx_t *ctx, char **cursor, int *out)
{
    char *tok = next_token(cursor);
    if (!tok)
        return parse_fail(ctx, "missing error name", NULL);
    int code = error_code_by_name(tok);
    if (code < 0)
        return parse_fail(ctx, "unknown error name", tok);
    if (next_token(cursor))
        return parse_fail(ctx, "trailing text after", tok);
    *out = code;
    return 0;
}

static int parse_flag(parse_ctx_t *ctx, char **cursor, int *out)
{
    char *tok = next_token(cursor);
    if (!tok || (strcmp(tok, "0") != 0 && strcmp(tok, "1") != 0) || next_token(cursor))
        return parse_fail(ctx, "expected 0 or 1", tok);
    *out = tok[0] == '1';
    return 0;
}

static int parse_field(parse_ctx_t *ctx, char **cursor, field_t *field)
{
    char *tok;
    int cap = 0;
    free(field->items); /* a repeated key replaces the earlier one */
    field->items = NULL;
    field->n = 0;
    while ((tok = next_token(cursor)) != NULL) {
        item_t item = {0, 0};
        if ((tok[0] >= '0' && tok[0] <= '9') || tok[0] == '-' || tok[0] == '+') {
            if (parse_int(tok, &item.value) < 0)
                return parse_fail(ctx, "bad number", tok);
        } else {
            item.error = error_code_by_name(tok);
            if (item.error < 0)
                return parse_fail(ctx, "neither a number nor an error name", tok);
        }
        if (field->n == cap) {
            cap = cap ? cap * 2 : 8;
            item_t *grown = realloc(field->items, (size_t)cap * sizeof *grown);
            if (!grown)
                return parse_fail(ctx, "out of memory", NULL);
            field->items = grown;
        }
        field->items[field->n++] = item;
    }
    if (field->n == 0)
        return parse_fail(ctx, "missing value", NULL);
    return 0;
}

static int parse_mig_device(parse_ctx_t *ctx, char **cursor, gpu_t *g)
{
    char *tok[7] = {NULL};
    int n = 0;
    while (n < 7 && (tok[n] = next_token(cursor)) != NULL)
        n++;
    if ((n != 5 && n != 7) || next_token(cursor))
        return parse_fail(ctx, "expected <gi> <ci> <profile> <total> <used> [<pid> <bytes>]", NULL);
    if (g->nmigs == MAX_MIG)
        return parse_fail(ctx, "too many MIG devices", NULL);
    mig_t *m = &g->migs[g->nmigs];
    long long v[6] = {0};
    const int numeric[6] = {0, 1, 3, 4, 5, 6};
    for (int i = 0; i < (n == 7 ? 6 : 4); i++)
        if (parse_int(tok[numeric[i]], &v[i]) < 0 || v[i] < 0)
            return parse_fail(ctx, "bad number", tok[numeric[i]]);
    if (strlen(tok[2]) >= sizeof m->profile)
        return parse_fail(ctx, "profile too long", tok[2]);
    memset(m, 0, sizeof *m);
    m->gi = (unsigned int)v[0];
    m->ci = (unsigned int)v[1];
    snprintf(m->profile, sizeof m->profile, "%s", tok[2]);
    m->total = (unsigned long long)v[2];
    m->used = (unsigned long long)v[3];
    if (n == 7) {
        m->has_proc = 1;
        m->proc.pid = (unsigned int)v[4];
        m->proc.used = (unsigned long long)v[5];
    }
    g->nmigs++;
    return 0;
}

static int parse_process(parse_ctx_t *ctx, char **cursor, gpu_t *g, int kind)
{
    char *pid_tok = next_token(cursor);
    char *mem_tok = next_token(cursor);
    long long pid, mem;
    if (!pid_tok || !mem_tok || next_token(cursor))
        return parse_fail(ctx, "expected <pid> <used bytes>", NULL);
    if (parse_int(pid_tok, &pid) < 0 || pid < 0 || pid > 0xFFFFFFFFLL)
        return parse_fail(ctx, "bad pid", pid_tok);
    if (parse_int(mem_tok, &mem) < 0 || mem < 0)
        return parse_fail(ctx, "bad byte count", mem_tok);
    if (g->nprocs[kind] == g->capprocs[kind]) {
        unsigned int cap = g->capprocs[kind] ? g->capprocs[kind] * 2 : 8;
        proc_t *grown = realloc(g->procs[kind], cap * sizeof *grown);
        if (!grown)
            return parse_fail(ctx, "out of memory", NULL);
        g->procs[kind] = grown;
        g->capprocs[kind] = cap;
    }
    g->procs[kind][g->nprocs[kind]].pid = (unsigned int)pid;
    g->procs[kind][g->nprocs[kind]].used = (unsigned long long)mem;
    g->nprocs[kind]++;
    return 0;
}

static int parse_xid(parse_ctx_t *ctx, char **cursor, gpu_t *g)
{
    char *xid_tok = next_token(cursor);
    char *t_tok = next_token(cursor);
    long long xid, t_ms;
    if (!xid_tok || !t_tok || next_token(cursor))
        return parse_fail(ctx, "expected <xid> <unix time in ms>", NULL);
    if (parse_int(xid_tok, &xid) < 0 || xid <= 0 || xid > 0xFFFFFFFFLL)
        return parse_fail(ctx, "bad xid", xid_tok);
    if (parse_int(t_tok, &t_ms) < 0 || t_ms < 0)
        return parse_fail(ctx, "bad time", t_tok);
    if (g->nxids == g->capxids) {
        unsigned int cap = g->capxids ? g->capxids * 2 : 8;
        xid_t *grown = realloc(g->xids, cap * sizeof *grown);
        if (!grown)
            return parse_fail(ctx, "out of memory", NULL);
        g->xids = grown;
        g->capxids = cap;
    }
    g->xids[g->nxids].xid = (unsigned int)xid;
    g->xids[g->nxids].t_ms = t_ms;
    g->nxids++;
    return 0;
}

static int copy_text(parse_ctx_t *ctx, char *dst, size_t size, char *cursor)
{
    char *text = rest_of_line(cursor);
    if (strlen(text) >= size)
        return parse_fail(ctx, "text too long", text);
    memcpy(dst, text, strlen(text) + 1);
    return 0;
}

/* Whether this build of the library exports fn (dlsym on the library itself). */
static int exported(const char *fn)
{
    Dl_info info;
    if (!dladdr((void *)&exported, &info) || !info.dli_fname)
        return 1;
    void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self)
        return 1;
    int found = dlsym(self, fn) != NULL;
    dlclose(self);
    return found;
}

/* "without f...": the scenario plays a driver branch lacking these functions, which
 * only a build that leaves them out can do (build_library(without=...)). */
static int parse_without(parse_ctx_t *ctx, char **cursor)
{
    char *tok;
    int n = 0;
    while ((tok = next_token(cursor)) != NULL) {
        int known = 0;
        for (int i = 0; i < FN_COUNT && !known; i++)
            known = strcmp(tok, FN_NAMES[i]) == 0;
        if (!known)
            return parse_fail(ctx, "unknown NVML function", tok);
        if (exported(tok))
            return parse_fail(ctx, "this build exports (see build_library(without=))", tok);
        n++;
    }
    if (n == 0)
        return parse_fail(ctx, "missing function name", NULL);
    return 0;
}

static int parse_line(parse_ctx_t *ctx, scenario_t *sc, char *line)
{
    char *cursor = line;
    char *key = next_token(&cursor);
    if (!key || key[0] == '#')
        return 0;

    if (strcmp(key, "gpu") == 0) {
        if (next_token(&cursor))
            return parse_fail(ctx, "\"gpu\" takes no value", NULL);
        if (sc->ngpus == MAX_GPUS)
            return parse_fail(ctx, "too many GPUs", NULL);
        gpu_defaults(&sc->gpus[sc->ngpus], sc->ngpus);
        sc->ngpus++;
        return 0;
    }
    if (strcmp(key, "init_error") == 0) {
        char *tok = next_token(&cursor);
        long long code;
        if (!tok || next_token(&cursor))
            return parse_fail(ctx, "expected one error name or code", NULL);
        if (parse_int(tok, &code) == 0)
            sc->init_error = (int)code;
        else if ((sc->init_error = error_code_by_name(tok)) < 0)
            return parse_fail(ctx, "unknown error name", tok);
        return 0;
    }
    if (strcmp(key, "without") == 0)
        return parse_without(ctx, &cursor);
    if (strcmp(key, "driver_version") == 0)
        return copy_text(ctx, sc->driver_version, sizeof sc->driver_version, cursor);
    if (strcmp(key, "nvml_version") == 0)
        return copy_text(ctx, sc->nvml_version, sizeof sc->nvml_version, cursor);
    if (strcmp(key, "cuda_driver_version") == 0) {
        char *tok = next_token(&cursor);
        long long v;
        if (!tok || parse_int(tok, &v) < 0 || next_token(&cursor))
            return parse_fail(ctx, "expected an integer", tok);
        sc->cuda_driver_version = (int)v;
        return 0;
    }

    if (sc->ngpus == 0)
        return parse_fail(ctx, "unknown global key (device keys need a \"gpu\" line first)", key);
    gpu_t *g = &sc->gpus[sc->ngpus - 1];

    if (strcmp(key, "name") == 0)
        return copy_text(ctx, g->name, sizeof g->name, cursor);
    if (strcmp(key, "uuid") == 0)
        return copy_text(ctx, g->uuid, sizeof g->uuid, cursor);
    if (strcmp(key, "lost") == 0)
        return parse_flag(ctx, &cursor, &g->lost);
    if (strcmp(key, "memory_v2") == 0)
        return parse_flag(ctx, &cursor, &g->memory_v2);
    if (strcmp(key, "mig") == 0)
        return parse_flag(ctx, &cursor, &g->mig);
    if (strcmp(key, "process") == 0)
        return parse_process(ctx, &cursor, g, P_COMPUTE);
    if (strcmp(key, "mig_device") == 0)
        return parse_mig_device(ctx, &cursor, g);
    if (strcmp(key, "graphics_process") == 0)
        return parse_process(ctx, &cursor, g, P_GRAPHICS);
    if (strcmp(key, "xid") == 0)
        return parse_xid(ctx, &cursor, g);
    if (strcmp(key, "processes_error") == 0)
        return parse_error_name(ctx, &cursor, &g->procs_error[P_COMPUTE]);
    if (strcmp(key, "graphics_processes_error") == 0)
        return parse_error_name(ctx, &cursor, &g->procs_error[P_GRAPHICS]);
    for (int f = 0; f < F_COUNT; f++)
        if (strcmp(key, FIELD_NAMES[f]) == 0)
            return parse_field(ctx, &cursor, &g->fields[f]);
    return parse_fail(ctx, "unknown key", key);
}

/* Parses text (modified in place) into sc; returns 0 or -1 with ctx->message set. */
static int parse_scenario(parse_ctx_t *ctx, scenario_t *sc, char *text)
{
    snprintf(sc->driver_version, sizeof sc->driver_version, "550.54.15");
    sc->cuda_driver_version = 12040;
    char *line = text;
    while (line) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\r')
            line[n - 1] = '\0';
        ctx->line++;
        if (parse_line(ctx, sc, line) < 0)
            return -1;
        line = nl ? nl + 1 : NULL;
    }
    if (sc->nvml_version[0] == '\0')
        snprintf(sc->nvml_version, sizeof sc->nvml_version, "%d.%s",
                 sc->cuda_driver_version / 1000, sc->driver_version);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loading and reloading (call with g_lock held)                             */
/* ------------------------------------------------------------------------ */

static void set_absent(void)
{
    if (g_state == SC_LOADED)
        scenario_free(&g_sc);
    g_state = SC_ABSENT;
    g_have_key = 0;
}

static int same_key(const file_key_t *a, const file_key_t *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec &&
           strcmp(a->path, b->path) == 0;
}

static void key_from_stat(file_key_t *key, const char *path, const struct stat *st)
{
    memset(key, 0, sizeof *key);
    snprintf(key->path, sizeof key->path, "%s", path);
    key->dev = st->st_dev;
    key->ino = st->st_ino;
    key->size = st->st_size;
    key->mtime = st->st_mtim;
    key->ctime = st->st_ctim;
}

static void refresh(void)
{
    const char *env = getenv("FAKE_NVML_SCENARIO");
    char path[sizeof g_key.path];
    struct stat st;
    if (!env || !*env || strlen(env) >= sizeof path) {
        set_absent();
        return;
    }
    memcpy(path, env, strlen(env) + 1);
    if (stat(path, &st) != 0) {
        set_absent();
        return;
    }
    file_key_t key;
    key_from_stat(&key, path, &st);
    if (g_have_key && same_key(&key, &g_key))
        return;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_absent();
        return;
    }
    if (fstat(fd, &st) != 0) {
        close(fd);
        set_absent();
        return;
    }
    key_from_stat(&key, path, &st); /* describe the file actually read */
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *text = malloc(cap);
    ssize_t got = 0;
    while (text && (got = read(fd, text + len, cap - 1 - len)) > 0) {
        len += (size_t)got;
        if (len == cap - 1) {
            char *grown = realloc(text, cap * 2);
            if (!grown) {
                free(text);
                text = NULL;
                break;
            }
            text = grown;
            cap *= 2;
        }
    }
    close(fd);

    if (g_state == SC_LOADED)
        scenario_free(&g_sc);
    memset(&g_sc, 0, sizeof g_sc);
    g_key = key;
    g_have_key = 1;

    parse_ctx_t ctx = {path, 0, ""};
    if (!text || got < 0) {
        snprintf(ctx.message, sizeof ctx.message, "%.200s: cannot read", path);
    } else {
        text[len] = '\0';
        if (parse_scenario(&ctx, &g_sc, text) == 0) {
            free(text);
            g_state = SC_LOADED;
            return;
        }
    }
    free(text);
    scenario_free(&g_sc);
    g_state = SC_BROKEN;
    fprintf(stderr, "fake_nvml: bad scenario: %s\n", ctx.message);
}

/* ------------------------------------------------------------------------ */
/* Call accounting                                                           */
/* ------------------------------------------------------------------------ */

static void log_call(int fn, int index)
{
    const char *path = getenv("FAKE_NVML_CALL_LOG");
    if (!path || !*path)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    char line[160];
    int n = snprintf(line, sizeof line, "%lld %s %d %d\n", ms, FN_NAMES[fn], index, (int)getpid());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t ignored = write(fd, line, (size_t)n); /* one write: lines never interleave */
    (void)ignored;
    close(fd);
}

static int handle_index(nvmlDevice_t dev)
{
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_handles;
    if (p < base || p >= base + sizeof g_handles || (p - base) % sizeof g_handles[0] != 0)
        return -1;
    return (int)((p - base) / sizeof g_handles[0]);
}

/* Every entry point starts with enter() and returns through leave(). */
static void enter(int fn, int index)
{
    pthread_mutex_lock(&g_lock);
    g_calls[fn]++;
    log_call(fn, index);
    refresh();
}

static nvmlReturn_t leave(nvmlReturn_t ret)
{
    pthread_mutex_unlock(&g_lock);
    return ret;
}

/* Status of the library for a call that needs nvmlInit. */
static nvmlReturn_t ready(void)
{
    if (g_init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (g_state == SC_ABSENT)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (g_state == SC_BROKEN)
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* enter() + ready() + handle check; on success *gpu is the device's state. */
static nvmlReturn_t enter_device(int fn, nvmlDevice_t dev, gpu_t **gpu)
{
    int index = handle_index(dev);
    enter(fn, index);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return ret;
    if (index < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned int)index >= g_sc.ngpus || g_sc.gpus[index].lost)
        return NVML_ERROR_GPU_IS_LOST;
    *gpu = &g_sc.gpus[index];
    return NVML_SUCCESS;
}

/* A MIG device's handle: its parent's index (and *slot), or -1 for any other pointer. */
static int mig_handle(nvmlDevice_t dev, unsigned int *slot)
{
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_mig_handles;
    if (p < base || p >= base + sizeof g_mig_handles ||
        (p - base) % sizeof g_mig_handles[0] != 0)
        return -1;
    unsigned int i = (unsigned int)((p - base) / sizeof g_mig_handles[0]);
    *slot = i % MAX_MIG;
    return (int)(i / MAX_MIG);
}

static int is_mig(nvmlDevice_t dev)
{
    unsigned int slot;
    return mig_handle(dev, &slot) >= 0;
}

/* enter_device() for a MIG device's handle: its parent and its slice. */
static nvmlReturn_t enter_mig(int fn, nvmlDevice_t dev, gpu_t **gpu, mig_t **mig)
{
    unsigned int slot = 0;
    int index = mig_handle(dev, &slot);
    enter(fn, index);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return ret;
    if (index < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned int)index >= g_sc.ngpus || g_sc.gpus[index].lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (g_sc.gpus[index].mig != 1 || slot >= g_sc.gpus[index].nmigs)
        return NVML_ERROR_NOT_FOUND; /* the slice is gone (a rewritten scenario) */
    *gpu = &g_sc.gpus[index];
    *mig = &g_sc.gpus[index].migs[slot];
    return NVML_SUCCESS;
}

#define MIG_CALL(fn, dev)                                        \
    gpu_t *g = NULL;                                             \
    mig_t *m = NULL;                                             \
    do {                                                         \
        nvmlReturn_t early_ = enter_mig(FN_##fn, dev, &g, &m);   \
        if (early_ != NVML_SUCCESS)                              \
            return leave(early_);                                \
    } while (0)

/* Next item of a field; returns its error code (NOT_SUPPORTED when not given). */
static nvmlReturn_t take(gpu_t *g, int f, long long *out)
{
    field_t *field = &g->fields[f];
    if (field->n == 0) {
        if (f == F_MEM_RESERVED || f == F_VIRTUALIZATION) { /* 0: none */
            *out = 0;
            return NVML_SUCCESS;
        }
        if (f == F_POWER_MGMT_LIMIT)
            return take(g, F_POWER_LIMIT, out);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    item_t item = field->items[field->pos];
    if (field->pos < field->n - 1)
        field->pos++;
    *out = item.value;
    return item.error;
}

static nvmlReturn_t take_uint(gpu_t *g, int f, unsigned int *out)
{
    long long v = 0;
    nvmlReturn_t ret = take(g, f, &v);
    if (ret == NVML_SUCCESS)
        *out = (unsigned int)v;
    return ret;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT unsigned long long fake_nvml_call_count(const char *name)
{
    unsigned long long total = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FN_COUNT; i++)
        if (!name || strcmp(name, FN_NAMES[i]) == 0)
            total += g_calls[i];
    pthread_mutex_unlock(&g_lock);
    return total;
}

EXPORT int fake_nvml_init_count(void)
{
    pthread_mutex_lock(&g_lock);
    int count = g_init_count;
    pthread_mutex_unlock(&g_lock);
    return count;
}

EXPORT void fake_nvml_reset_call_counts(void)
{
    pthread_mutex_lock(&g_lock);
    memset(g_calls, 0, sizeof g_calls);
    pthread_mutex_unlock(&g_lock);
}

/* ------------------------------------------------------------------------ */
/* Initialisation and system queries                                         */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t do_init(int fn)
{
    enter(fn, -1);
    if (g_state == SC_ABSENT)
        return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    if (g_state == SC_BROKEN)
        return leave(NVML_ERROR_UNKNOWN);
    if (g_sc.init_error != NVML_SUCCESS)
        return leave(g_sc.init_error);
    g_init_count++;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlInit(void) { return do_init(FN_nvmlInit); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(FN_nvmlInit_v2); }

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(FN_nvmlInitWithFlags);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    enter(FN_nvmlShutdown, -1);
    if (g_init_count == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    g_init_count--;
    return leave(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    enter(FN_nvmlErrorString, -1);
    leave(NVML_SUCCESS);
    for (size_t i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == result)
            return ERRORS[i].text;
    return "Unknown Error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    enter(FN_nvmlSystemGetDriverVersion, -1);
    nvmlReturn_t ret = ready();
    if (ret == NVML_SUCCESS)
        ret = copy_out(version, length, g_sc.driver_version);
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    enter(FN_nvmlSystemGetNVMLVersion, -1);
    nvmlReturn_t ret = ready();
    if (ret == NVML_SUCCESS)
        ret = copy_out(version, length, g_sc.nvml_version);
    return leave(ret);
}

static nvmlReturn_t cuda_version(int fn, int *version)
{
    enter(fn, -1);
    nvmlReturn_t ret = ready();
    if (ret == NVML_SUCCESS && !version)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS)
        *version = g_sc.cuda_driver_version;
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    return cuda_version(FN_nvmlSystemGetCudaDriverVersion, v);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return cuda_version(FN_nvmlSystemGetCudaDriverVersion_v2, v);
}

/* The name of a live local process (from /proc/<pid>/comm); NOT_FOUND otherwise. */
EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    enter(FN_nvmlSystemGetProcessName, -1);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return leave(ret);
    if (!name || length == 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    char path[64], comm[256];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return leave(NVML_ERROR_NOT_FOUND);
    char *got = fgets(comm, sizeof comm, f);
    fclose(f);
    if (!got)
        return leave(NVML_ERROR_NOT_FOUND);
    comm[strcspn(comm, "\n")] = '\0';
    snprintf(name, length, "%s", comm); /* NVML truncates here too */
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Device enumeration                                                        */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t device_count(int fn, unsigned int *count)
{
    enter(fn, -1);
    nvmlReturn_t ret = ready();
    if (ret == NVML_SUCCESS && !count)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS)
        *count = g_sc.ngpus;
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return device_count(FN_nvmlDeviceGetCount, c); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { return device_count(FN_nvmlDeviceGetCount_v2, c); }

static nvmlReturn_t handle_by_index(int fn, unsigned int index, nvmlDevice_t *device)
{
    enter(fn, index < MAX_GPUS ? (int)index : -1);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return leave(ret);
    if (!device || index >= g_sc.ngpus)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g_sc.gpus[index].lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    g_handles[index].index = index;
    *device = &g_handles[index];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex, i, d);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex_v2, i, d);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    enter(FN_nvmlDeviceGetHandleByUUID, -1);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return leave(ret);
    if (!uuid || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < g_sc.ngpus; i++) {
        if (strcmp(g_sc.gpus[i].uuid, uuid) != 0)
            continue;
        if (g_sc.gpus[i].lost)
            return leave(NVML_ERROR_GPU_IS_LOST);
        g_handles[i].index = i;
        *device = &g_handles[i];
        return leave(NVML_SUCCESS);
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

/* ------------------------------------------------------------------------ */
/* Per-device queries                                                        */
/* ------------------------------------------------------------------------ */

/* Declares gpu_t *g, enters, and returns early unless the device is usable. */
#define DEVICE_CALL(fn, dev)                                   \
    gpu_t *g = NULL;                                           \
    do {                                                       \
        nvmlReturn_t early_ = enter_device(FN_##fn, dev, &g);  \
        if (early_ != NVML_SUCCESS)                            \
            return leave(early_);                              \
    } while (0)

#define REQUIRE(ptr)                                           \
    do {                                                       \
        if (!(ptr))                                            \
            return leave(NVML_ERROR_INVALID_ARGUMENT);         \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    DEVICE_CALL(nvmlDeviceGetIndex, dev);
    REQUIRE(index);
    *index = (unsigned int)(g - g_sc.gpus);
    return leave(NVML_SUCCESS);
}

/* A MIG device's name, as NVML gives it: "<GPU name> MIG <profile>". */
static nvmlReturn_t mig_name(nvmlDevice_t dev, char *name, unsigned int length)
{
    MIG_CALL(nvmlDeviceGetName, dev);
    char text[TEXT_LEN + 48];
    snprintf(text, sizeof text, "%s MIG %s", g->name, m->profile);
    return leave(copy_out(name, length, text));
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    if (is_mig(dev))
        return mig_name(dev, name, length);
    DEVICE_CALL(nvmlDeviceGetName, dev);
    return leave(copy_out(name, length, g->name));
}

/* A MIG device's UUID: "MIG-" and one of its own, made of its GPU's index and its slot. */
static nvmlReturn_t mig_uuid(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    MIG_CALL(nvmlDeviceGetUUID, dev);
    char text[TEXT_LEN];
    unsigned int index = (unsigned int)(g - g_sc.gpus);
    snprintf(text, sizeof text, "MIG-fa4e%04x-0000-4000-8000-%012x", index,
             (unsigned int)(m - g->migs));
    return leave(copy_out(uuid, length, text));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    if (is_mig(dev))
        return mig_uuid(dev, uuid, length);
    DEVICE_CALL(nvmlDeviceGetUUID, dev);
    return leave(copy_out(uuid, length, g->uuid));
}

/* Reads total, used and reserved (each advancing its sequence); first error wins. */
static nvmlReturn_t read_memory(gpu_t *g, unsigned long long *total, unsigned long long *used,
                                unsigned long long *reserved)
{
    long long t = 0, u = 0, r = 0;
    nvmlReturn_t et = take(g, F_MEM_TOTAL, &t);
    nvmlReturn_t eu = take(g, F_MEM_USED, &u);
    nvmlReturn_t er = take(g, F_MEM_RESERVED, &r);
    if (et != NVML_SUCCESS)
        return et;
    if (eu != NVML_SUCCESS)
        return eu;
    if (er != NVML_SUCCESS)
        return er;
    *total = (unsigned long long)t;
    *used = (unsigned long long)u;
    *reserved = (unsigned long long)r;
    return NVML_SUCCESS;
}

/* A MIG device's memory, v1 or v2 (none reserved): fixed, not a sequence. */
static nvmlReturn_t mig_memory(int fn, nvmlDevice_t dev, unsigned long long *total,
                               unsigned long long *used)
{
    gpu_t *g = NULL;
    mig_t *m = NULL;
    nvmlReturn_t ret = enter_mig(fn, dev, &g, &m);
    if (ret == NVML_SUCCESS) {
        *total = m->total;
        *used = m->used;
    }
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *memory)
{
    if (is_mig(dev)) {
        unsigned long long total = 0, used = 0;
        nvmlReturn_t ret = mig_memory(FN_nvmlDeviceGetMemoryInfo, dev, &total, &used);
        if (ret == NVML_SUCCESS && !memory)
            ret = NVML_ERROR_INVALID_ARGUMENT;
        if (ret == NVML_SUCCESS) {
            memory->total = total;
            memory->used = used;
            memory->free = used < total ? total - used : 0;
        }
        return leave(ret);
    }
    DEVICE_CALL(nvmlDeviceGetMemoryInfo, dev);
    REQUIRE(memory);
    unsigned long long total, used, reserved;
    nvmlReturn_t ret = read_memory(g, &total, &used, &reserved);
    if (ret == NVML_SUCCESS) {
        memory->total = total;
        memory->used = used;
        memory->free = used < total ? total - used : 0;
    }
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory)
{
    if (is_mig(dev)) {
        unsigned long long total = 0, used = 0;
        nvmlReturn_t ret = mig_memory(FN_nvmlDeviceGetMemoryInfo_v2, dev, &total, &used);
        if (ret == NVML_SUCCESS && (!memory || memory->version != NVML_MEMORY_V2))
            ret = memory ? NVML_ERROR_ARGUMENT_VERSION_MISMATCH : NVML_ERROR_INVALID_ARGUMENT;
        if (ret == NVML_SUCCESS) {
            memory->total = total;
            memory->reserved = 0;
            memory->used = used;
            memory->free = used < total ? total - used : 0;
        }
        return leave(ret);
    }
    DEVICE_CALL(nvmlDeviceGetMemoryInfo_v2, dev);
    if (!g->memory_v2)
        return leave(NVML_ERROR_FUNCTION_NOT_FOUND);
    REQUIRE(memory);
    if (memory->version != NVML_MEMORY_V2)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned long long total, used, reserved;
    nvmlReturn_t ret = read_memory(g, &total, &used, &reserved);
    if (ret == NVML_SUCCESS) {
        memory->total = total;
        memory->reserved = reserved;
        memory->used = used > reserved ? used - reserved : 0;
        memory->free = used < total ? total - used : 0;
    }
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util)
{
    DEVICE_CALL(nvmlDeviceGetUtilizationRates, dev);
    REQUIRE(util);
    if (g->mig == 1) /* NVML: not supported on MIG-enabled GPUs */
        return leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned int gpu = 0, mem = 0;
    nvmlReturn_t eg = take_uint(g, F_UTIL, &gpu);
    nvmlReturn_t em = take_uint(g, F_MEM_UTIL, &mem);
    nvmlReturn_t ret = eg != NVML_SUCCESS ? eg : em;
    if (ret == NVML_SUCCESS) {
        util->gpu = gpu;
        util->memory = mem;
    }
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *temp)
{
    DEVICE_CALL(nvmlDeviceGetTemperature, dev);
    REQUIRE(temp);
    if (sensor != NVML_TEMPERATURE_GPU)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(take_uint(g, F_TEMP, temp));
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *temp)
{
    DEVICE_CALL(nvmlDeviceGetTemperatureV, dev);
    REQUIRE(temp);
    if (temp->version != NVML_TEMPERATURE_V1)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (temp->sensorType != NVML_TEMPERATURE_GPU)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    long long v = 0;
    nvmlReturn_t ret = take(g, F_TEMP, &v);
    if (ret == NVML_SUCCESS)
        temp->temperature = (int)v;
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *power)
{
    DEVICE_CALL(nvmlDeviceGetPowerUsage, dev);
    REQUIRE(power);
    return leave(take_uint(g, F_POWER, power));
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *limit)
{
    DEVICE_CALL(nvmlDeviceGetEnforcedPowerLimit, dev);
    REQUIRE(limit);
    return leave(take_uint(g, F_POWER_LIMIT, limit));
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t dev, unsigned int *limit)
{
    DEVICE_CALL(nvmlDeviceGetPowerManagementLimit, dev);
    REQUIRE(limit);
    return leave(take_uint(g, F_POWER_MGMT_LIMIT, limit));
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t dev,
                                                        unsigned long long *energy)
{
    DEVICE_CALL(nvmlDeviceGetTotalEnergyConsumption, dev);
    REQUIRE(energy);
    long long v = 0;
    nvmlReturn_t ret = take(g, F_ENERGY, &v);
    if (ret == NVML_SUCCESS)
        *energy = (unsigned long long)v;
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t dev, unsigned int *speed)
{
    DEVICE_CALL(nvmlDeviceGetFanSpeed, dev);
    REQUIRE(speed);
    return leave(take_uint(g, F_FAN, speed));
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *clock)
{
    DEVICE_CALL(nvmlDeviceGetClockInfo, dev);
    REQUIRE(clock);
    if (type < 0 || type >= NVML_CLOCK_COUNT)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(take_uint(g, F_CLOCK_GRAPHICS + type, clock));
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned int *clock)
{
    DEVICE_CALL(nvmlDeviceGetMaxClockInfo, dev);
    REQUIRE(clock);
    if (type < 0 || type >= NVML_CLOCK_COUNT)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(take_uint(g, F_MAX_CLOCK_GRAPHICS + type, clock));
}

/*
 * NVML's two-step protocol: with *count smaller than the number of processes
 * (typically 0 with infos NULL) it stores the number needed in *count and returns
 * INSUFFICIENT_SIZE -- or SUCCESS when there are none. Otherwise it fills infos
 * and stores the number written.
 */
/* The compute process on a MIG device, with its instance ids (none for other kinds). */
static nvmlReturn_t mig_processes(int fn, nvmlDevice_t dev, unsigned int *count,
                                  nvmlProcessInfo_t *infos, int kind)
{
    gpu_t *g = NULL;
    mig_t *m = NULL;
    nvmlReturn_t ret = enter_mig(fn, dev, &g, &m);
    if (ret != NVML_SUCCESS)
        return leave(ret);
    REQUIRE(count);
    unsigned int n = kind == P_COMPUTE && m->has_proc ? 1 : 0;
    if (*count < n || (n > 0 && !infos)) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if (n) {
        infos[0].pid = m->proc.pid;
        infos[0].usedGpuMemory = m->proc.used;
        infos[0].gpuInstanceId = m->gi;
        infos[0].computeInstanceId = m->ci;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t running_processes(int fn, nvmlDevice_t dev, unsigned int *count,
                                      nvmlProcessInfo_t *infos, int kind)
{
    if (is_mig(dev))
        return mig_processes(fn, dev, count, infos, kind);
    gpu_t *g = NULL;
    nvmlReturn_t ret = enter_device(fn, dev, &g);
    if (ret != NVML_SUCCESS)
        return leave(ret);
    REQUIRE(count);
    if (g->mig == 1) /* NVML: the parent's aggregate needs privileges a user lacks */
        return leave(NVML_ERROR_NO_PERMISSION);
    unsigned int n = 0;
    const proc_t *procs = NULL;
    if (kind < P_KINDS) {
        if (g->procs_error[kind] != NVML_SUCCESS)
            return leave(g->procs_error[kind]);
        n = g->nprocs[kind];
        procs = g->procs[kind];
    }
    if (*count < n || (n > 0 && !infos)) {
        *count = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = procs[i].pid;
        infos[i].usedGpuMemory = procs[i].used;
        infos[i].gpuInstanceId = NO_INSTANCE;
        infos[i].computeInstanceId = NO_INSTANCE;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c,
                                                            nvmlProcessInfo_t *p)
{
    return running_processes(FN_nvmlDeviceGetComputeRunningProcesses_v3, d, c, p, P_COMPUTE);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c,
                                                            nvmlProcessInfo_t *p)
{
    return running_processes(FN_nvmlDeviceGetComputeRunningProcesses_v2, d, c, p, P_COMPUTE);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c,
                                                             nvmlProcessInfo_t *p)
{
    return running_processes(FN_nvmlDeviceGetGraphicsRunningProcesses_v3, d, c, p, P_GRAPHICS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c,
                                                             nvmlProcessInfo_t *p)
{
    return running_processes(FN_nvmlDeviceGetGraphicsRunningProcesses_v2, d, c, p, P_GRAPHICS);
}

/* No MPS server in any scenario: always an empty list. */
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c,
                                                               nvmlProcessInfo_t *p)
{
    return running_processes(FN_nvmlDeviceGetMPSComputeRunningProcesses_v3, d, c, p, P_KINDS);
}

/* ------------------------------------------------------------------------ */
/* MIG and virtualization                                                    */
/* ------------------------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned int *current,
                                         unsigned int *pending)
{
    DEVICE_CALL(nvmlDeviceGetMigMode, dev);
    REQUIRE(current && pending);
    if (g->mig < 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = (unsigned int)g->mig;
    return leave(NVML_SUCCESS);
}

/* The most MIG devices a MIG-capable GPU can have (an H100's 7), enabled or not. */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned int *count)
{
    DEVICE_CALL(nvmlDeviceGetMaxMigDeviceCount, dev);
    REQUIRE(count);
    if (g->mig < 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *count = MAX_MIG;
    return leave(NVML_SUCCESS);
}

/* The handle of MIG device `index` of a MIG-enabled GPU; NOT_FOUND where there is none. */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned int index,
                                                        nvmlDevice_t *mig)
{
    DEVICE_CALL(nvmlDeviceGetMigDeviceHandleByIndex, dev);
    REQUIRE(mig);
    if (g->mig != 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= g->nmigs)
        return leave(NVML_ERROR_NOT_FOUND);
    unsigned int slot = (unsigned int)(g - g_sc.gpus) * MAX_MIG + index;
    g_mig_handles[slot].index = slot;
    *mig = &g_mig_handles[slot];
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned int *id)
{
    MIG_CALL(nvmlDeviceGetGpuInstanceId, dev);
    REQUIRE(id);
    *id = m->gi;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned int *id)
{
    MIG_CALL(nvmlDeviceGetComputeInstanceId, dev);
    REQUIRE(id);
    *id = m->ci;
    return leave(NVML_SUCCESS);
}

/* nvmlGpuVirtualizationMode_t: 0 none, 1 passthrough, 2 vGPU (a guest), 3 host vGPU,
 * 4 host vSGA. */
EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t dev, unsigned int *mode)
{
    DEVICE_CALL(nvmlDeviceGetVirtualizationMode, dev);
    REQUIRE(mode);
    return leave(take_uint(g, F_VIRTUALIZATION, mode));
}

/* ------------------------------------------------------------------------ */
/* Clock event (throttle) reasons, ECC counts, retired pages, remapped rows  */
/* ------------------------------------------------------------------------ */

/* The current item of a field without moving on (0 when the field is not given). */
static long long peek(const gpu_t *g, int f)
{
    const field_t *field = &g->fields[f];
    return field->n ? field->items[field->pos].value : 0;
}

static int given(const gpu_t *g, int f) { return g->fields[f].n > 0; }

/* Both names read clock_reasons: R535 renamed ...ThrottleReasons to ...EventReasons. */
static nvmlReturn_t clock_reasons(int fn, nvmlDevice_t dev, unsigned long long *reasons)
{
    gpu_t *g = NULL;
    nvmlReturn_t ret = enter_device(fn, dev, &g);
    if (ret != NVML_SUCCESS)
        return leave(ret);
    REQUIRE(reasons);
    long long v = 0;
    ret = take(g, F_CLOCK_REASONS, &v);
    if (ret == NVML_SUCCESS)
        *reasons = (unsigned long long)v;
    return leave(ret);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r)
{
    return clock_reasons(FN_nvmlDeviceGetCurrentClocksEventReasons, d, r);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
                                                              unsigned long long *r)
{
    return clock_reasons(FN_nvmlDeviceGetCurrentClocksThrottleReasons, d, r);
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate. */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int errorType, int counterType,
                                                unsigned long long *count)
{
    static const int FIELDS[2][2] = {
        {F_ECC_CORRECTED_VOLATILE, F_ECC_CORRECTED_AGGREGATE},
        {F_ECC_UNCORRECTED_VOLATILE, F_ECC_UNCORRECTED_AGGREGATE},
    };
    DEVICE_CALL(nvmlDeviceGetTotalEccErrors, dev);
    REQUIRE(count);
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    long long v = 0;
    nvmlReturn_t ret = take(g, FIELDS[errorType][counterType], &v);
    if (ret == NVML_SUCCESS)
        *count = (unsigned long long)v;
    return leave(ret);
}

/* Page retirement (before Ampere): supported when either count is given. The counts
 * are read without moving on, since pynvml asks twice per query (size, then pages). */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, int cause, unsigned int *count,
                                              unsigned long long *addresses)
{
    DEVICE_CALL(nvmlDeviceGetRetiredPages, dev);
    REQUIRE(count);
    if (cause < 0 || cause > 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!given(g, F_RETIRED_SBE) && !given(g, F_RETIRED_DBE))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    long long n = peek(g, cause ? F_RETIRED_DBE : F_RETIRED_SBE);
    unsigned int pages = n > 0 ? (unsigned int)n : 0;
    if (*count < pages || (pages > 0 && !addresses)) {
        *count = pages;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < pages; i++)
        addresses[i] = ((unsigned long long)(cause + 1) << 32) | ((i + 1ULL) << 12);
    *count = pages;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending)
{
    DEVICE_CALL(nvmlDeviceGetRetiredPagesPendingStatus, dev);
    REQUIRE(pending);
    if (!given(g, F_RETIRED_SBE) && !given(g, F_RETIRED_DBE))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *pending = peek(g, F_RETIRED_PENDING) != 0;
    return leave(NVML_SUCCESS);
}

/* Row remapping (Ampere and later): supported when either count is given. */
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corrected,
                                              unsigned int *uncorrected, unsigned int *pending,
                                              unsigned int *failure)
{
    DEVICE_CALL(nvmlDeviceGetRemappedRows, dev);
    REQUIRE(corrected && uncorrected && pending && failure);
    if (!given(g, F_REMAPPED_CORRECTED) && !given(g, F_REMAPPED_UNCORRECTED))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *corrected = (unsigned int)peek(g, F_REMAPPED_CORRECTED);
    *uncorrected = (unsigned int)peek(g, F_REMAPPED_UNCORRECTED);
    *pending = peek(g, F_REMAPPED_PENDING) != 0;
    *failure = peek(g, F_REMAPPED_FAILURE) != 0;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Events: XID critical errors through an event set                          */
/* ------------------------------------------------------------------------ */

#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_MEMORY 20
#define EVENT_SINGLE_BIT_ECC 0x1ULL
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_XID 0x8ULL
#define SUPPORTED_EVENTS (EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_XID)
#define MAX_EVENT_SETS 128

struct fake_event_set {
    int used;
    unsigned long long mask[MAX_GPUS];
    long long since_ms; /* events scripted before the set was made are not seen */
    long long last_ms;  /* the last event delivered: (time, gpu, xid) */
    int last_gpu;
    unsigned int last_xid;
};
typedef struct fake_event_set *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

static struct fake_event_set g_sets[MAX_EVENT_SETS];

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static struct fake_event_set *event_set(nvmlEventSet_t set)
{
    uintptr_t p = (uintptr_t)set, base = (uintptr_t)g_sets;
    if (p < base || p >= base + sizeof g_sets || (p - base) % sizeof g_sets[0] != 0)
        return NULL;
    return set->used ? set : NULL;
}

/* As NVML documents: no events on a MIG-enabled GPU or in a vGPU guest. */
static int events_refused(const gpu_t *g)
{
    return g->mig == 1 || (given(g, F_VIRTUALIZATION) && peek(g, F_VIRTUALIZATION) == 2);
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    enter(FN_nvmlEventSetCreate, -1);
    nvmlReturn_t ret = ready();
    if (ret != NVML_SUCCESS)
        return leave(ret);
    REQUIRE(set);
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (g_sets[i].used)
            continue;
        memset(&g_sets[i], 0, sizeof g_sets[i]);
        g_sets[i].used = 1;
        g_sets[i].since_ms = now_ms();
        g_sets[i].last_ms = -1;
        *set = &g_sets[i];
        return leave(NVML_SUCCESS);
    }
    return leave(NVML_ERROR_MEMORY);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    /* Freeing needs the library, not the GPUs: a set is freed whatever the scenario
     * says now (a driver gone since it was made), or its slot would stay taken. */
    enter(FN_nvmlEventSetFree, -1);
    if (g_init_count == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    struct fake_event_set *s = event_set(set);
    REQUIRE(s);
    memset(s, 0, sizeof *s);
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types)
{
    DEVICE_CALL(nvmlDeviceGetSupportedEventTypes, dev);
    REQUIRE(types);
    if (events_refused(g))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *types = SUPPORTED_EVENTS;
    return leave(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                             nvmlEventSet_t set)
{
    DEVICE_CALL(nvmlDeviceRegisterEvents, dev);
    struct fake_event_set *s = event_set(set);
    REQUIRE(s);
    if (events_refused(g) || (types & ~SUPPORTED_EVENTS))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    s->mask[g - g_sc.gpus] |= types;
    return leave(NVML_SUCCESS);
}

/* Whether event (t, gpu, xid) comes after the set's last delivered one. */
static int after_last(const struct fake_event_set *s, long long t, int gpu, unsigned int xid)
{
    if (t != s->last_ms)
        return t > s->last_ms;
    if (gpu != s->last_gpu)
        return gpu > s->last_gpu;
    return xid > s->last_xid;
}

/* The next XID due for the set (time order), or -1; its device in *gpu. */
static int next_xid(const struct fake_event_set *s, long long now, int *gpu)
{
    int best = -1;
    long long best_t = 0;
    for (unsigned int i = 0; i < g_sc.ngpus; i++) {
        if (!(s->mask[i] & EVENT_XID))
            continue;
        const gpu_t *g = &g_sc.gpus[i];
        for (unsigned int k = 0; k < g->nxids; k++) {
            const xid_t *x = &g->xids[k];
            if (x->t_ms < s->since_ms || x->t_ms > now || !after_last(s, x->t_ms, (int)i, x->xid))
                continue;
            if (best < 0 || x->t_ms < best_t ||
                (x->t_ms == best_t && ((int)i < *gpu ||
                                       ((int)i == *gpu && x->xid < g_sc.gpus[*gpu].xids[best].xid)))) {
                best = (int)k;
                best_t = x->t_ms;
                *gpu = (int)i;
            }
        }
    }
    return best;
}

/* Waits up to timeout ms for the next scripted XID, re-reading the scenario as it
 * goes, without holding the library's lock (other threads' calls go on meanwhile). */
static nvmlReturn_t event_wait(int fn, nvmlEventSet_t set, nvmlEventData_t *data,
                               unsigned int timeout)
{
    enter(fn, -1);
    long long deadline = now_ms() + timeout;
    for (;;) {
        nvmlReturn_t ret = ready();
        if (ret != NVML_SUCCESS)
            return leave(ret);
        struct fake_event_set *s = event_set(set);
        REQUIRE(s && data);
        long long now = now_ms();
        int gpu = -1;
        int k = next_xid(s, now, &gpu);
        if (k >= 0) {
            const xid_t *x = &g_sc.gpus[gpu].xids[k];
            s->last_ms = x->t_ms;
            s->last_gpu = gpu;
            s->last_xid = x->xid;
            g_handles[gpu].index = (unsigned int)gpu;
            data->device = &g_handles[gpu];
            data->eventType = EVENT_XID;
            data->eventData = x->xid;
            data->gpuInstanceId = NO_INSTANCE;
            data->computeInstanceId = NO_INSTANCE;
            return leave(NVML_SUCCESS);
        }
        if (now >= deadline)
            return leave(NVML_ERROR_TIMEOUT);
        long long nap = deadline - now < 50 ? deadline - now : 50; /* XIDs come 50 ms late */
        struct timespec pause = {0, (long)(nap * 1000000)};
        pthread_mutex_unlock(&g_lock);
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&g_lock);
        refresh();
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeoutms)
{
    return event_wait(FN_nvmlEventSetWait_v2, set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                     unsigned int timeoutms)
{
    return event_wait(FN_nvmlEventSetWait, set, data, timeoutms);
}
