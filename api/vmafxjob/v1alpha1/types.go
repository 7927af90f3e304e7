// Package v1alpha1 is the VmafxJob custom resource of the vmafx operator:
// a quality-measurement job declared in Kubernetes, submitted by the
// operator to the vmafx controller and followed until it finishes.
//
// +kubebuilder:object:generate=true
// +groupName=vmafx.callerauth.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of VmafxJob.
var GroupVersion = schema.GroupVersion{Group: "vmafx.callerauth.dev", Version: "v1alpha1"}

// Phases of a VmafxJob.
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	// PhaseCancelled: the job was cancelled at the controller (CancelJob).
	PhaseCancelled = "Cancelled"
)

// Condition types.
const (
	// ConditionSubmitted is True once the controller accepted the job.
	ConditionSubmitted = "Submitted"
	// ConditionControllerReachable is False while the controller refuses
	// or cannot be reached; its reason and message say why (the refusal's
	// reason, or the token file and its expiry).
	ConditionControllerReachable = "ControllerReachable"
	// ConditionFinished is True once the job succeeded or failed.
	ConditionFinished = "Finished"
)

// VmafxJobSpec is what to measure.
type VmafxJobSpec struct {
	// Reference is the reference clip (YUV4MPEG2, 8-bit 4:2:0): a path
	// relative to the tenant's clip directory on the nodes, without ".."
	// elements. Required unless JobID is set.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reference string `json:"reference,omitempty"`
	// Distorted is the clip measured against the reference, named as
	// Reference is. Required unless JobID is set.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Distorted string `json:"distorted,omitempty"`
	// Metrics wanted. Required unless JobID is set.
	// +optional
	// +kubebuilder:validation:items:Enum=psnr;ssim
	Metrics []string `json:"metrics"`
	// JobID, when set, tracks a job already submitted to the controller
	// (by a CLI, say) instead of submitting a new one: the operator only
	// polls it. It must be a job of the operator's tenant, or the
	// controller answers NotFound.
	// +optional
	JobID string `json:"jobID,omitempty"`
}

// Score is one metric over the clip.
type Score struct {
	Metric string `json:"metric"`
	// Mean and Min are decimal strings: CRDs avoid floats.
	Mean   string `json:"mean"`
	Min    string `json:"min"`
	Frames int64  `json:"frames"`
}

// VmafxJobStatus is what the controller says of the job.
type VmafxJobStatus struct {
	// Phase is Pending, Running, Succeeded, Failed or Cancelled.
	// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Cancelled
	Phase string `json:"phase,omitempty"`
	// JobID is the controller's job id.
	JobID string `json:"jobID,omitempty"`
	// Scores of a succeeded job.
	Scores []Score `json:"scores,omitempty"`
	// Summary is the scores in one line, for kubectl get.
	Summary string `json:"summary,omitempty"`
	// Message is the controller's error for a failed job, or why the job
	// cannot be followed.
	Message string `json:"message,omitempty"`
	// Conditions: Submitted, ControllerReachable, Finished.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// VmafxJob is a quality-measurement job.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vj
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Scores",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.status.jobID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VmafxJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VmafxJobSpec   `json:"spec"`
	Status VmafxJobStatus `json:"status,omitempty"`
}

// VmafxJobList is a list of VmafxJobs.
//
// +kubebuilder:object:root=true
type VmafxJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VmafxJob `json:"items"`
}

// AddToScheme registers the types.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &VmafxJob{}, &VmafxJobList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
