! hpc_refer_policy.f90: a trained hpc_refer policy inside a Fortran solver (Fortran 2008), over
! the C routine hpc_refer_policy.c (bind(c); see hpc_refer_policy.h for what it computes).
!
!     cc -O2 -c hpc_refer_policy.c
!     gfortran -O2 -c hpc_refer_policy.f90
!     gfortran solver.f90 hpc_refer_policy.o ... -lm
!
!     use hpc_refer_policy
!     type(hpc_refer_policy_t) :: policy
!     call hpc_refer_policy_load(policy, "DIR", ierr, message)    ! DIR holds policy.json
!     call hpc_refer_policy_reset(policy)                         ! at an episode's start
!     call hpc_refer_policy_act(policy, state, action, ierr)      ! state(state_dim[, K])
!     call hpc_refer_policy_free(policy)
!
! ierr is HPC_REFER_OK (0) or one of the codes below, with the message of
! hpc_refer_policy_message(policy) (or load's optional message); a failed call changes nothing.
! Several agents: state(state_dim, K) and action(act_dim, K), one column an agent.
module hpc_refer_policy
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_char, c_int, c_size_t, &
                                         c_double, c_null_char, c_f_pointer
  implicit none
  private

  integer, parameter, public :: HPC_REFER_OK = 0, HPC_REFER_ERR_FILE = 1, &
    HPC_REFER_ERR_VERSION = 2, HPC_REFER_ERR_HEADER = 3, HPC_REFER_ERR_WEIGHTS = 4, &
    HPC_REFER_ERR_SHAPE = 5, HPC_REFER_ERR_NONFINITE = 6, HPC_REFER_ERR_MEMORY = 7

  type, public :: hpc_refer_policy_t
    type(c_ptr) :: handle = c_null_ptr
  end type hpc_refer_policy_t

  public :: hpc_refer_policy_load, hpc_refer_policy_act, hpc_refer_policy_reset, &
            hpc_refer_policy_free, &
            hpc_refer_policy_message, hpc_refer_policy_state_dim, hpc_refer_policy_act_dim

  interface hpc_refer_policy_act
    module procedure act_one, act_agents
  end interface hpc_refer_policy_act

  interface
    integer(c_int) function c_load(path, policy, message, message_len) &
        bind(c, name="hpc_refer_policy_load")
      import :: c_char, c_ptr, c_int, c_size_t
      character(kind=c_char), dimension(*), intent(in) :: path
      type(c_ptr), intent(out) :: policy
      character(kind=c_char), dimension(*), intent(inout) :: message
      integer(c_size_t), value :: message_len
    end function c_load

    integer(c_int) function c_act(policy, state, n_state, action, n_action) &
        bind(c, name="hpc_refer_policy_act")
      import :: c_ptr, c_int, c_size_t, c_double
      type(c_ptr), value :: policy
      real(c_double), dimension(*), intent(in) :: state
      integer(c_size_t), value :: n_state
      real(c_double), dimension(*), intent(inout) :: action
      integer(c_size_t), value :: n_action
    end function c_act

    subroutine c_reset(policy) bind(c, name="hpc_refer_policy_reset")
      import :: c_ptr
      type(c_ptr), value :: policy
    end subroutine c_reset

    subroutine c_free(policy) bind(c, name="hpc_refer_policy_free")
      import :: c_ptr
      type(c_ptr), value :: policy
    end subroutine c_free

    type(c_ptr) function c_message(policy) bind(c, name="hpc_refer_policy_message")
      import :: c_ptr
      type(c_ptr), value :: policy
    end function c_message

    integer(c_int) function c_state_dim(policy) bind(c, name="hpc_refer_policy_state_dim")
      import :: c_ptr, c_int
      type(c_ptr), value :: policy
    end function c_state_dim

    integer(c_int) function c_act_dim(policy) bind(c, name="hpc_refer_policy_act_dim")
      import :: c_ptr, c_int
      type(c_ptr), value :: policy
    end function c_act_dim

    integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
    end function c_strlen
  end interface

contains

  !> Read DIR/policy.json (path: the directory or the .json file) and its weights.
  subroutine hpc_refer_policy_load(policy, path, ierr, message)
    type(hpc_refer_policy_t), intent(out) :: policy
    character(len=*), intent(in) :: path
    integer, intent(out) :: ierr
    character(len=*), intent(out), optional :: message
    character(kind=c_char) :: buffer(512)
    integer :: i
    buffer = c_null_char
    ierr = int(c_load(trim(path) // c_null_char, policy%handle, buffer, &
                      int(size(buffer), c_size_t)))
    if (present(message)) then
      message = ""
      do i = 1, min(len(message), size(buffer))
        if (buffer(i) == c_null_char) exit
        message(i:i) = buffer(i)
      end do
    end if
  end subroutine hpc_refer_policy_load

  !> One agent: state(state_dim) -> action(act_dim), in the solver's units.
  subroutine act_one(policy, state, action, ierr)
    type(hpc_refer_policy_t), intent(in) :: policy
    real(c_double), intent(in), contiguous :: state(:)
    real(c_double), intent(inout), contiguous :: action(:)
    integer, intent(out) :: ierr
    ierr = int(c_act(policy%handle, state, int(size(state), c_size_t), action, &
                     int(size(action), c_size_t)))
  end subroutine act_one

  !> K agents: state(state_dim, K) -> action(act_dim, K).
  subroutine act_agents(policy, state, action, ierr)
    type(hpc_refer_policy_t), intent(in) :: policy
    real(c_double), intent(in), contiguous :: state(:, :)
    real(c_double), intent(inout), contiguous :: action(:, :)
    integer, intent(out) :: ierr
    ierr = int(c_act(policy%handle, state, int(size(state), c_size_t), action, &
                     int(size(action), c_size_t)))
  end subroutine act_agents

  !> The next state is an episode's first.
  subroutine hpc_refer_policy_reset(policy)
    type(hpc_refer_policy_t), intent(in) :: policy
    call c_reset(policy%handle)
  end subroutine hpc_refer_policy_reset

  subroutine hpc_refer_policy_free(policy)
    type(hpc_refer_policy_t), intent(inout) :: policy
    call c_free(policy%handle)
    policy%handle = c_null_ptr
  end subroutine hpc_refer_policy_free

  !> The message of the last failed call ("" after a successful one).
  function hpc_refer_policy_message(policy) result(message)
    type(hpc_refer_policy_t), intent(in) :: policy
    character(len=:), allocatable :: message
    type(c_ptr) :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    text = c_message(policy%handle)
    n = int(c_strlen(text))
    call c_f_pointer(text, chars, [n])
    allocate(character(len=n) :: message)
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function hpc_refer_policy_message

  integer function hpc_refer_policy_state_dim(policy)
    type(hpc_refer_policy_t), intent(in) :: policy
    hpc_refer_policy_state_dim = int(c_state_dim(policy%handle))
  end function hpc_refer_policy_state_dim

  integer function hpc_refer_policy_act_dim(policy)
    type(hpc_refer_policy_t), intent(in) :: policy
    hpc_refer_policy_act_dim = int(c_act_dim(policy%handle))
  end function hpc_refer_policy_act_dim

end module hpc_refer_policy
